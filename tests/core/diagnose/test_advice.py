"""The advice of `check` (proxycheck.core.diagnose.advice): judged exchanges in, words out.

Each test builds the exchanges a real hop produces (an nginx 413, LiteLLM's 500 after its
timeout, a cut after a second of silence ...) by hand, and asserts what the advice says and, as
much, what it must not claim: a figure the exchanges do not show, a timeout where the hop
answered at once, an error of the hop's that the engine answered, buffering for a stream held
open after its end.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxycheck.core.diagnose.advice import ENGINE_ADVICE, advice, advise, group, kind_of
from proxycheck.core.diagnose.localize import Decided, Localizer
from proxycheck.core.diagnose.verdict import PROXY, Judged
from proxycheck.core.exchange.observation import Observation, ResultSummary
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.socks import auth_refused, refused
from proxycheck.core.protocol.result import Event
from proxycheck.core.recording.websocket import ended_idle


def ok(route: str = "direct", *, turn: int = 1, session: str = "s1", rep: int = 1, request_bytes: int = 1000,
       ttft: float = 0.05, gap: float = 0.02, tokens: int = 10) -> Observation:  # fmt: skip
    """A clean stream: `tokens` content events `gap` apart after `ttft`, then the terminal event."""
    events = tuple(Event(round(ttft + gap * i, 4), 40, "content") for i in range(tokens))
    events += (Event(round(ttft + gap * tokens, 4), 14, "terminal"),)
    return Observation(
        route=route, repetition=rep, session=session, turn=turn, xid=turn, t_start=rep * 100.0 + turn,
        headers=0.01, first_event=ttft, first_content=ttft, end=events[-1].t, events=events, status=200,
        request_bytes=request_bytes, result=ResultSummary("x", 80, completion_tokens=tokens, terminal=True),
        outcome=Outcome.OK,
    )  # fmt: skip


def failed(outcome: Outcome, route: str = "via:edge", *, turn: int = 1, session: str = "s1", rep: int = 1,
           status: int | None = 200, headers: float | None = 0.01, events: tuple[Event, ...] = (),
           end: float | None = 10.0, detail: str = "", request_bytes: int = 1000,
           response_headers: tuple[tuple[str, str], ...] = (), reused: bool | None = None,
           idle: float | None = None) -> Observation:  # fmt: skip
    return Observation(
        route=route, repetition=rep, session=session, turn=turn, xid=turn, t_start=rep * 100.0 + turn,
        headers=headers, end=end, events=events, status=status, request_bytes=request_bytes,
        response_headers=response_headers, reused=reused, idle=idle, outcome=outcome, detail=detail,
        first_content=next((e.t for e in events if e.kind == "content"), None),
    )  # fmt: skip


def judged(obs: Observation, reference: Observation | None = None, outcome: Outcome | None = None,
           detail: str | None = None) -> Judged:  # fmt: skip
    return Judged(obs, outcome or obs.outcome, obs.detail if detail is None else detail, reference)


def content(n: int, start: float = 0.05, gap: float = 0.02) -> tuple[Event, ...]:
    return tuple(Event(round(start + gap * i, 4), 40, "content") for i in range(n))


def one(hop: str, items: list[Judged], context: dict[str, list[Judged]] | None = None):  # type: ignore[no-untyped-def]
    (a,) = group([(hop, j) for j in items], context).values()
    return a


# -- 413: what passed and what was refused, per route ------------------------------------------

NGINX_413 = ("HTTP 413: <html> <head><title>413 Request Entity Too Large</title></head> <body> <center><h1>413 "
             "Request Entity Too Large</h1></center> <hr><center>nginx/1.22.1</center> </body> </html>")  # fmt: skip
# Two sessions of three turns; the third turn of each is over the hop's limit. The first refused
# in time (s2's, 60,590 B) is not the largest request of the run (s1's, 67,078 B).
BODIES = {("s1", 1): 30_000, ("s1", 2): 60_112, ("s1", 3): 67_078,
          ("s2", 1): 25_000, ("s2", 2): 50_000, ("s2", 3): 60_590}  # fmt: skip


def body_limit_run(route: str = "via:edge", reps: int = 2) -> list[Judged]:
    out = []
    for rep in range(1, reps + 1):
        for (session, turn), size in BODIES.items():
            ref = ok(turn=turn, session=session, rep=rep, request_bytes=size)
            if turn == 3:
                obs = failed(Outcome.HTTP_ERROR, route, turn=turn, session=session, rep=rep, status=413, end=0.002,
                             headers=0.002, detail=NGINX_413, request_bytes=size)  # fmt: skip
            else:
                obs = replace(ok(route, turn=turn, session=session, rep=rep, request_bytes=size))
            out.append(judged(obs, ref))
    return out


def test_413_advice_gives_the_largest_body_that_passed_and_the_smallest_refused() -> None:
    run = body_limit_run()
    refused = [j for j in run if j.failed]
    a = one("edge", refused, {"via:edge": run})
    assert a.kind == "body_limit" and a.exchanges == 4 and a.routes == ("via:edge",)
    assert "requests up to 60,112 B passed via:edge, the smallest refused was 60,590 B: the limit lies between" in a.seen
    assert "'413 Request Entity Too Large'" in a.seen  # the page's title, not its HTML
    assert "client_max_body_size" in a.likely and "body size" in a.likely
    # The fix names the largest request of the run, not the failing exchange's own size.
    assert a.fix == "raise it above the largest request body the sessions send (67,078 B in this run)"
    assert a.text == f"{a.seen}; likely: {a.likely}; fix: {a.fix}"


def test_413_advice_per_route_through_the_same_hop() -> None:
    # via:corp passes edge too: the figures are said for each route, the advice given once.
    edge, corp = body_limit_run("via:edge"), body_limit_run("via:corp", reps=1)
    a = one("edge", [j for j in edge + corp if j.failed], {"via:edge": edge, "via:corp": corp})
    assert a.exchanges == 6 and a.routes == ("via:edge", "via:corp")
    assert "passed via:edge, the smallest refused was 60,590 B" in a.seen
    assert "passed via:corp, the smallest refused was 60,590 B" in a.seen


def test_413_advice_does_not_claim_a_limit_between_when_a_larger_body_passed() -> None:
    # A request larger than one refused went through: the sizes do not bound a body limit.
    run = body_limit_run()
    big = judged(ok("via:edge", turn=4, request_bytes=80_000), ok(turn=4, request_bytes=80_000))
    a = one("edge", [j for j in run if j.failed], {"via:edge": run + [big]})
    assert "lies between" not in a.text
    assert "a request of 80,000 B passed and one of 60,590 B was refused: not a limit on the body size alone" in a.seen


def test_413_advice_of_one_exchange_claims_nothing_about_others() -> None:
    # advice() of a lone exchange knows no other exchange of the route: not "no request passed".
    obs = failed(Outcome.HTTP_ERROR, status=413, detail=NGINX_413, request_bytes=60_590)
    text = advice(Outcome.HTTP_ERROR, obs, "edge")
    assert "no request passed" not in text and "lies between" not in text
    assert "a request of 60,590 B was refused on via:edge" in text and "at least 60,590 B" in text
    # With the route's exchanges and none of them through: said as such.
    a = one("edge", [judged(obs)], {"via:edge": [judged(obs)]})
    assert "no request passed via:edge; the smallest refused was 60,590 B" in a.seen


# -- once per hop and kind, with its count ------------------------------------------------------


def localized(direct: list[Observation], via: list[Observation]) -> Decided:
    loc = Localizer(["direct", "via:edge"], {"via:edge": ("edge",)})
    loc.add(direct + via)
    step = loc.next(final=True)
    assert isinstance(step, Decided)
    return step


def test_advice_is_given_once_per_hop_and_kind_with_the_exchanges_it_covers() -> None:
    direct, via = [], []
    for rep in (1, 2):
        for (session, turn), size in BODIES.items():
            direct.append(ok(turn=turn, session=session, rep=rep, request_bytes=size))
            if turn == 3:
                via.append(failed(Outcome.HTTP_ERROR, turn=turn, session=session, rep=rep, status=413,
                                  detail=NGINX_413, request_bytes=size, headers=0.002, end=0.002))  # fmt: skip
            elif turn == 2:  # and a 504 after the hop's 1 s timeout: another kind, its own advice
                via.append(failed(Outcome.HTTP_ERROR, turn=turn, session=session, rep=rep, status=504, headers=1.01,
                                  end=1.01, detail="HTTP 504: <html><head><title>504 Gateway Time-out</title>",
                                  request_bytes=size))  # fmt: skip
            else:
                via.append(ok("via:edge", turn=turn, session=session, rep=rep, request_bytes=size))
    verdict = localized(direct, via).verdict
    assert verdict.verdict == PROXY and verdict.culprit == "edge"
    assert len(verdict.findings) == 8  # every failing exchange is still listed
    kinds = [(a.hop, a.kind, a.exchanges) for a in verdict.advice]
    assert sorted(kinds) == [("edge", "body_limit", 4), ("edge", "http_504", 4)]
    by_kind = {a.kind: a for a in verdict.advice}
    for f in verdict.findings:
        kind = "body_limit" if f.turn == 3 else "http_504"
        assert f.advice == by_kind[kind].text  # each finding holds its advice's words
    # No 504 passed the body limit's bookkeeping as "passed": only 2xx answers count.
    assert "requests up to 30,000 B passed via:edge, the smallest refused was 60,590 B" in by_kind["body_limit"].seen
    doc = verdict.to_json()
    assert [a["exchanges"] for a in doc["advice"]] == [a.exchanges for a in verdict.advice]
    assert {a["kind"] for a in doc["advice"]} == {"body_limit", "http_504"}


def test_the_engines_failures_get_the_engine_advice_once() -> None:
    direct = [failed(Outcome.RESET, "direct", turn=t, rep=r, events=content(3)) for r in (1, 2) for t in (1, 2)]
    verdict = localized(direct, []).verdict
    (a,) = verdict.advice
    assert a.hop is None and a.text == ENGINE_ADVICE and a.exchanges == 4
    assert all(f.advice == ENGINE_ADVICE for f in verdict.findings)


# -- stalls: likely causes apart from the fixes -------------------------------------------------


def test_a_mid_stream_stall_names_the_silence_and_keeps_likely_apart_from_fix() -> None:
    # 12 tokens, then keep-alive comments only until the watchdog cut it at 10.65 s: the
    # comments are no data, the silence counts from the last content event (0.27 s).
    events = content(12) + tuple(Event(2.6 + 2.0 * i, 14, "comment") for i in range(5))
    obs = failed(Outcome.STALL_MID_STREAM, events=events, end=10.65, detail="no content for 10.0 s after event 17")
    a = one("edge", [judged(obs, ok(gap=0.05))])
    assert a.kind == "stall_mid_stream"
    assert a.seen.startswith("content flowed through hop edge (12 content events), then none for 10.4 s")
    assert "keep-alive comments still came" in a.seen
    assert a.likely.startswith("response buffering in the hop, or a read timeout shorter than the gaps between tokens")
    assert "10.4 s of silence here; the longest gap on the direct route: 0.05 s" in a.likely
    assert a.fix.startswith("proxy_buffering off / X-Accel-Buffering: no") and "proxy_read_timeout" in a.fix
    assert "above the longest gap" in a.fix and "proxy_buffering" not in a.likely


def test_a_stall_before_the_first_event_is_told_from_one_mid_stream() -> None:
    obs = failed(Outcome.STALL_BEFORE_FIRST_EVENT, events=(Event(0.02, 30, "meta"),), end=10.02)
    a = one("edge", [judged(obs, ok(ttft=1.6))])
    assert a.kind == "stall_before_first_event"
    assert "passed the response headers, then no content event for 10.0 s (1 event before it, none with content)" in a.seen
    assert "shorter than the engine's prefill" in a.likely and "the first token came after up to 1.6 s" in a.likely
    assert "gaps between tokens" not in a.text and "above the longest prefill" in a.fix


def test_held_open_advice_has_the_same_shape_and_never_says_buffering() -> None:
    end = content(10) + (Event(0.3, 14, "terminal"),)
    after_end = failed(Outcome.HELD_OPEN, events=end, end=10.3,
                       detail="held open after its end: [DONE] came at 0.30 s, the body had not ended 10.0 s later")
    finish = failed(Outcome.HELD_OPEN, events=content(10), end=10.3,
                    detail="held open after its finish reason (stop at 0.25 s) without its terminator [DONE]")
    a, b = one("gw", [judged(after_end)]), one("gw", [judged(finish)])
    assert (a.kind, b.kind) == ("held_open_after_end", "held_open_after_finish")
    assert "held the body open for 10.0 s more" in a.seen and "kept-alive connection" in a.likely
    assert "never the stream's terminator ([DONE])" in b.seen and "OpenAI" in b.likely
    for x in (a, b):
        assert x.likely and x.fix and "buffer" not in x.text.lower()
    # Without the events, the terminal event is not claimed.
    bare = one("gw", [judged(replace(after_end, events=()))])
    assert "terminal event" not in bare.seen and "held the stream open after its answer had come" in bare.seen


# -- an error the hop answered itself -----------------------------------------------------------

LITELLM_500 = ('HTTP 500: {"error":{"message":"litellm.APIConnectionError: Timeout on reading data from socket",'
               '"type":null,"param":null,"code":"500"}}')  # fmt: skip


def test_a_hops_error_quotes_its_body_and_the_time_it_took() -> None:
    obs = failed(Outcome.HTTP_ERROR, route="via:gw", status=500, headers=1.52, end=1.53, detail=LITELLM_500)
    a = one("gw", [judged(obs, ok(ttft=3.2))])
    assert a.kind == "http_500"
    assert a.seen == ("hop gw answered HTTP 500 'litellm.APIConnectionError: Timeout on reading data from socket' "
                      "1.5 s after the request, where the direct route answers 2xx")  # fmt: skip
    assert a.likely.startswith("a timeout of about 1.5 s in the hop (less, if it retried upstream first")
    assert "the first token came after up to 3.2 s on the direct route" in a.likely
    assert "LiteLLM timeout / stream_timeout" in a.fix and "proxy_read_timeout" in a.fix and "prefill" in a.fix


def test_a_wait_far_longer_than_the_engine_takes_is_not_called_the_timeout() -> None:
    # LiteLLM with `timeout` 1 s in front of a 1.5 s prefill: three tries and their back-off, so
    # its 408 comes 7.6 s after the request. 7.6 s is not the timeout setting.
    body = ('HTTP 408: {"error":{"message":"litellm.Timeout: APITimeoutError - Request timed out.\\n\\nDeployment '
            'Info: model=proxycheck-agent","type":null,"param":null,"code":"408"}}')  # fmt: skip
    obs = failed(Outcome.HTTP_ERROR, route="via:litellm", status=408, headers=7.61, end=7.62, detail=body)
    a = one("litellm", [judged(obs, ok(ttft=1.5))])
    assert "'litellm.Timeout: APITimeoutError - Request timed out. Deployment Info: model=proxycheck-agent'" in a.seen
    assert "timeout of about 7.6 s in the hop" not in a.likely
    assert "tried more than once" in a.likely and "LiteLLM retries twice by default" in a.likely
    assert "the first token came after up to 1.5 s on the direct route" in a.likely
    assert "LiteLLM timeout / stream_timeout" in a.fix


def test_nginx_504_names_its_timeout_from_the_time_it_took() -> None:
    page = ("HTTP 504: <html> <head><title>504 Gateway Time-out</title></head> <body> <center><h1>504 Gateway "
            "Time-out</h1></center> <hr><center>nginx/1.22.1</center>")  # fmt: skip
    items = [judged(failed(Outcome.HTTP_ERROR, turn=t, status=504, headers=h, end=h, detail=page), ok(ttft=1.5))
             for t, h in ((2, 1.003), (3, 1.07))]  # fmt: skip
    a = one("nginx", items)
    assert "hop nginx answered HTTP 504 '504 Gateway Time-out' 1.0-1.1 s after the request" in a.seen
    assert "a timeout of about 1.0-1.1 s in the hop" in a.likely
    assert "HAProxy timeout server" in a.fix and "<html>" not in a.text


def test_a_502_answered_at_once_is_not_called_a_timeout() -> None:
    obs = failed(Outcome.HTTP_ERROR, status=502, headers=0.004, end=0.004, detail="HTTP 502: Bad Gateway")
    a = one("edge", [judged(obs, ok())])
    assert "0.00 s after the request" in a.seen
    assert "not a timeout" in a.likely and "timeout of about" not in a.text


def test_an_error_the_engine_answered_through_the_hop_is_not_blamed_on_the_hop_as_its_own() -> None:
    # The reference engine's digest header came back with the 400: the engine answered it.
    engine_400 = 'HTTP 400: {"object": "error", "message": "the request body is not JSON", "code": 400}'
    obs = failed(Outcome.HTTP_ERROR, status=400, headers=0.01, end=0.01, detail=engine_400,
                 response_headers=(("x-proxycheck-request-sha256", "ab" * 32),))  # fmt: skip
    a = one("gw", [judged(obs, ok())])
    assert a.kind == "engine_http_400"
    assert a.seen.startswith("the engine itself answered HTTP 400 'the request body is not JSON' to what hop gw forwarded")
    assert "changes the request" in a.likely and "hop gw answered" not in a.text


def test_litellms_error_inside_a_stream_gets_advice() -> None:
    # One token, then after LiteLLM's stream_timeout (1 s) an error event and the end of the stream.
    events = content(1) + (Event(1.06, 120, "error"),)
    obs = failed(Outcome.STREAM_ERROR, route="via:litellm", events=events, end=1.07,
                 detail="408: litellm.Timeout: APITimeoutError - Request timed out.")  # fmt: skip
    a = one("litellm", [judged(obs, ok(gap=1.5, tokens=2))])
    assert a.kind == "stream_error_timeout" and a.likely and a.fix
    assert "hop litellm sent an error inside the stream '408: litellm.Timeout: APITimeoutError" in a.seen
    assert "after 1 content event, 1.0 s after the last data, 1.1 s after the request" in a.seen
    assert "a timeout of about 1.0 s in the hop" in a.likely and "stream_timeout" in a.likely
    assert "shorter than the engine's gaps between tokens (up to 1.5 s on the direct route)" in a.likely


def test_an_error_inside_a_stream_without_a_timeout_is_not_called_one() -> None:
    events = content(3) + (Event(0.2, 80, "error"),)
    obs = failed(Outcome.STREAM_ERROR, events=events, end=0.2, detail="server_error: upstream said no")
    a = one("gw", [judged(obs, ok())])
    assert a.kind == "stream_error" and "timeout" not in a.likely and a.fix


# -- cuts ---------------------------------------------------------------------------------------


def test_a_cut_after_a_second_of_silence_is_a_read_timeout_against_the_prefill() -> None:
    obs = failed(Outcome.RESET, events=(Event(0.02, 30, "meta"),), end=1.03, detail="connection closed mid-stream")
    a = one("haproxy", [judged(obs, ok(ttft=1.6))])
    assert a.kind == "reset_before_first_event"
    assert "before the first token, 1.0 s after them" in a.seen
    assert "a read timeout of about 1.0 s in the hop" in a.likely and "HAProxy timeout server" in a.likely
    assert "shorter than the engine's prefill" in a.likely and a.fix == "raise it above the longest prefill"
    assert "idle" not in a.text and "keep-alive" not in a.text


def test_a_cut_between_tokens_says_so() -> None:
    obs = failed(Outcome.RESET, events=content(1), end=1.06)
    a = one("nginx", [judged(obs, ok(gap=1.5, tokens=2))])
    assert a.kind == "reset_mid_stream" and "proxy_read_timeout" in a.likely
    assert "gaps between tokens (the longest gap on the direct route: 1.5 s)" in a.likely


def test_a_cut_right_after_data_is_not_called_a_read_timeout() -> None:
    obs = failed(Outcome.RESET, events=content(20), end=0.45)
    a = one("edge", [judged(obs, ok())])
    assert "not a read timeout" in a.likely and "read timeout of about" not in a.likely


def test_a_stale_kept_alive_connection_is_told_from_a_cut_after_headers() -> None:
    stale = failed(Outcome.STALL_BEFORE_HEADERS, headers=None, status=None, end=2.0, reused=True, idle=1.2)
    a = one("B", [judged(stale, ok())])
    assert a.kind == "idle_connection" and "idle for 1.2 s" in a.seen and "keep-alive" in a.likely
    # The same connection idle as long, but the response had begun on it: it was alive.
    alive = failed(Outcome.RESET, events=(Event(0.02, 30, "meta"),), end=1.03, reused=True, idle=1.2)
    assert kind_of(Outcome.RESET, alive) == "reset_before_first_event"


# -- what the model sees, and the rest ----------------------------------------------------------


def test_request_mutated_quotes_what_the_model_sees_differently() -> None:
    detail = "messages 14 -> 6: the first 8 dropped"
    obs = failed(Outcome.REQUEST_MUTATED, end=0.3, detail=detail, events=content(10))
    a = one("gw", [judged(obs, ok())])
    assert a.seen == f"what the model sees differs through hop gw: {detail}"
    assert "other bytes" not in a.text and "trimming the context" in a.likely


@pytest.mark.parametrize("outcome", [o for o in Outcome if o is not Outcome.OK])
def test_no_finding_is_left_without_advice(outcome: Outcome) -> None:
    # Whatever the outcome, and with nothing else known about it, the advice says what is known.
    obs = failed(outcome, events=content(2), end=3.0)
    a = advise("gw", [judged(obs)])
    assert a.seen and a.fix and "hop gw" in a.text
    assert advice(outcome, obs).strip()


def test_an_outcome_without_specific_words_says_what_is_known_and_where_to_look() -> None:
    obs = failed(Outcome.IN_FLIGHT, turn=4, events=content(7), end=2.5)
    a = advise("gw", [judged(obs)])
    assert a.seen == "hop gw: in_flight at turn 4, 2.5 s after the request, after 7 content events"
    assert "look at the hop's log" in a.fix


# -- a cap on the response's duration -----------------------------------------------------------
#
# A hop that cuts every response at one time from its request however much data still flows
# (Cloudflare, a GCP load balancer, Envoy's route timeout, Varnish's send_timeout). Each failing
# exchange below streams a token every 40 ms from its first token until the cut; the direct
# route ran the same exchanges to their end, longer.


def cut_at(cut: float, *, ttft: float, turn: int, rep: int = 1, outcome: Outcome = Outcome.RESET, gap: float = 0.04,
           start: float | None = None, headers: float = 0.01, quiet: float = 0.02) -> Observation:  # fmt: skip
    """Cut `cut` s after the request, the last token `quiet` s before it."""
    n = int((cut - quiet - ttft) / gap) + 1
    events = (Event(headers + 0.001, 30, "meta"),) + content(n, ttft, gap)
    obs = failed(outcome, turn=turn, rep=rep, headers=headers, events=events, end=events[-1].t + quiet)
    return obs if start is None else replace(obs, t_start=start)


def ran(seconds: float, *, turn: int, rep: int = 1, route: str = "direct") -> Observation:
    """A complete answer that took `seconds` from its request."""
    return ok(route, turn=turn, rep=rep, ttft=0.3, gap=(seconds - 0.3) / 60, tokens=60)


def capped(ends: dict[tuple[int, int], float], ttft: dict[int, float], direct: float = 3.0,
           **kw) -> list[Judged]:  # type: ignore[no-untyped-def]
    """Turn `t` of repetition `r` cut `ends[(t, r)]` s after its request; direct ran `direct` s + 0.3 s per turn."""
    return [judged(cut_at(end, ttft=ttft[t], turn=t, rep=r, **kw), ran(direct + 0.3 * t, turn=t, rep=r))
            for (t, r), end in ends.items()]  # fmt: skip


TTFT = {2: 0.3, 3: 0.9}  # later turns prefill longer: the cuts come after fewer tokens
EQUAL = {(2, 1): 2.0, (3, 1): 2.03, (2, 2): 2.01, (3, 2): 2.05}


def test_cuts_at_one_time_after_the_request_while_data_flowed_are_a_cap_on_the_duration() -> None:
    a = one("varnish", capped(EQUAL, TTFT))
    assert a.kind == "reset_mid_stream" and a.exchanges == 4
    assert a.seen.startswith("hop varnish closed the connection mid-stream after 28-43 content events")
    assert a.likely.startswith("a cap on the response's duration of about 2.0 s from the request, not a read timeout")
    assert "every cut came then while data still flowed (0.02 s after the last)" in a.likely
    assert "the same exchanges ran 3.6-3.9 s on the direct route" in a.likely
    for setting in ("Cloudflare", "GCP load balancer", "Envoy's route timeout", "Varnish send_timeout",
                    "Traffic Server transaction_active_timeout", "AWS ALB"):  # fmt: skip
        assert setting in a.likely
    assert a.fix == ("raise the cap above the longest answer (3.9 s on the direct route here), or keep answers "
                     "under 2.0 s (fewer tokens per turn)")  # fmt: skip
    assert "connection limit" not in a.text and "size" not in a.likely
    # The same cuts ending the body cleanly (no terminal event): the same cap.
    b = one("varnish", capped(EQUAL, TTFT, outcome=Outcome.TRUNCATED))
    assert b.kind == "truncated_mid_stream" and b.likely == a.likely and b.fix == a.fix


@pytest.mark.parametrize(("late", "cap"), [(2.2, True), (2.3, False), (3.0, False)])
def test_cuts_are_a_cap_only_at_equal_times(late: float, cap: bool) -> None:
    # Within 0.25 s (what a real cap's timing scatters by) the cuts are equal; 0.3 s apart, or a
    # second apart, they are not: the advice is then what it was for a cut while data flowed.
    a = one("edge", capped({**EQUAL, (3, 2): late}, TTFT))
    assert ("a cap on the response's duration" in a.likely) is cap, a.likely
    if not cap:
        assert a.likely.startswith("not a read timeout (data came until 0.02 s before the cut): a connection limit")


def test_a_cap_counting_from_the_response_headers_is_said_so() -> None:
    # A hop that holds the headers until the first token (a prefill of 0.3 s or 1.2 s) and cuts
    # 2.0 s after them: the cuts are 2.3 s and 3.2 s after the request, equal after the headers.
    items = []
    for rep in (1, 2):
        for turn, first in ((2, 0.3), (3, 1.2)):
            obs = cut_at(first + 2.0, ttft=first + 0.001, turn=turn, rep=rep, headers=first)
            items.append(judged(obs, ran(4.0, turn=turn, rep=rep)))
    a = one("envoy", items)
    assert "a cap on the response's duration of about 2.0 s from the response headers" in a.likely
    assert "from the request" not in a.likely


def test_a_cut_after_a_silence_at_equal_times_is_still_a_read_timeout() -> None:
    # The cuts come 2.0 s after the request, but after 1 s without data: a read timeout fits.
    a = one("nginx", capped(EQUAL, TTFT, quiet=1.0))
    assert "a read timeout of about 1.0 s in the hop" in a.likely and "cap" not in a.likely


def test_no_cap_when_the_direct_route_answered_sooner_than_the_cuts() -> None:
    # The direct route ran the same exchanges 1.7-2.0 s: the cut did not stop a longer answer.
    items = [judged(j.obs, ran(1.7 if j.obs.turn == 2 else 2.0, turn=j.obs.turn, rep=j.obs.repetition))
             for j in capped(EQUAL, TTFT)]  # fmt: skip
    assert "cap" not in one("edge", items).likely
    # Nor without the direct route's answers to compare with.
    assert "cap" not in one("edge", [judged(j.obs) for j in capped(EQUAL, TTFT)]).likely


def test_no_cap_when_an_answer_longer_than_the_cuts_passed_the_route() -> None:
    items = capped(EQUAL, TTFT)
    long_one = judged(ran(3.5, turn=1, route="via:edge"), ran(3.5, turn=1))
    assert "cap" not in one("edge", items, {"via:edge": items + [long_one]}).likely
    short_one = judged(ran(1.0, turn=1, route="via:edge"), ran(1.0, turn=1))
    assert "a cap on the response's duration" in one("edge", items, {"via:edge": items + [short_one]}).likely


def test_cuts_at_one_moment_are_not_called_a_cap() -> None:
    # Two sessions' turns started together and cut together: a restart of the hop fits as well.
    items = [judged(replace(cut_at(2.0, ttft=0.3, turn=2), session=s), ran(3.5, turn=2)) for s in ("s1", "s2")]
    assert "cap" not in one("edge", items).likely
    # The same in the next repetition (its times count from its own start): no restart does that.
    again = [judged(replace(j.obs, repetition=2), j.reference) for j in items]
    assert "a cap on the response's duration of about 2.0 s" in one("edge", items + again).likely


def test_a_single_cut_is_not_called_a_cap() -> None:
    (item,) = capped({(2, 1): 2.0}, TTFT)
    assert "cap" not in one("edge", [item]).likely


def test_cuts_after_as_many_events_say_a_size_limit_fits_as_well() -> None:
    # The same exchange cut in two repetitions after as many tokens: a cap on the bytes could do that too.
    a = one("edge", capped({(2, 1): 2.0, (2, 2): 2.0}, TTFT))
    assert a.likely.startswith("a cap on the response's duration of about 2.0 s from the request, or on its size "
                               "(every cut came after 44 events), not a read timeout")  # fmt: skip
    assert "cuts of other exchanges, after other counts of events, would tell the two apart" in a.likely
    assert a.fix.endswith("; a size limit: raise it above the largest answer")


def before_first_token(cuts: dict[tuple[int, int], float], firsts: dict[int, float]) -> list[Judged]:
    """Turn `t` of repetition `r` cut `cuts[(t, r)]` s after its request, before any token; the
    direct route's first token came `firsts[t]` s after the request."""
    return [judged(failed(Outcome.RESET, turn=t, rep=r, events=(Event(0.011, 30, "meta"),), end=end),
                   ok(turn=t, rep=r, ttft=firsts[t], gap=0.04, tokens=30))
            for (t, r), end in cuts.items()]  # fmt: skip


def test_cuts_as_the_first_token_came_are_a_cap_checked_on_writes_not_a_read_timeout() -> None:
    # Varnish's send_timeout (1.5 s) in front of prefills of 2.1 s and 3.6 s: it cuts each stream
    # when it writes the first token, not 1.5 s after the request.
    firsts = {2: 2.1, 3: 3.6}
    a = one("varnish", before_first_token({(2, 1): 2.11, (3, 1): 3.62, (2, 2): 2.1, (3, 2): 3.61}, firsts))
    assert a.kind == "reset_before_first_event"
    assert a.likely.startswith("not a read timeout: each cut came as the stream's first token did on the direct "
                               "route (2.1-3.6 s after the request), at different times (2.1-3.6 s)")  # fmt: skip
    assert "Varnish send_timeout" in a.likely and "read timeout of about" not in a.likely
    assert a.fix.startswith("raise the cap above the longest answer (4.8 s on the direct route here)")
    # Cuts sooner than the token (by more than a cap's scatter): a read timeout, as before.
    b = one("nginx", before_first_token({(2, 1): 2.0, (3, 1): 3.0}, firsts))
    assert "a read timeout of about 2.0-3.0 s in the hop" in b.likely and "cap" not in b.likely
    # At one time (the same exchange twice): a read timeout of that time fits as well.
    c = one("nginx", before_first_token({(2, 1): 2.1, (2, 2): 2.1}, firsts))
    assert "a read timeout of about 2.1 s in the hop" in c.likely and "cap" not in c.likely


# -- SOCKS5 hops -------------------------------------------------------------------------------


def socks_refusal(code: int, target: str = "127.0.0.1:8000") -> Observation:
    detail = f"ProxyError: {refused('127.0.0.1:1080', target, code)}"
    return failed(Outcome.CONNECT_ERROR, "via:dante", status=None, headers=None, end=0.003, detail=detail)


@pytest.mark.parametrize(("code", "said"), [
    (2, "socks pass"), (5, "nothing listens at that address"), (4, "cannot reach that host"), (1, "its log"),
])  # fmt: skip
def test_a_socks_refusal_names_its_reply_and_the_setting_behind_it(code: int, said: str) -> None:
    obs = socks_refusal(code)
    assert kind_of(Outcome.CONNECT_ERROR, obs) == "socks_refused"
    a = one("dante", [judged(obs, ok())])
    assert f"hop dante, a SOCKS5 proxy, would not connect to 127.0.0.1:8000: reply {code}" in a.seen
    assert said in a.likely + a.fix, a.text


def test_a_name_the_proxy_could_not_have_is_said_as_likely_unresolved() -> None:
    obs = socks_refusal(4, "engine.lan:8000")
    assert kind_of(Outcome.CONNECT_ERROR, obs) == "socks_unresolved"
    a = one("dante", [judged(obs, ok())])
    assert "cannot resolve engine.lan" in a.likely and "or cannot reach the host" in a.likely, a.text
    assert "socks5://" in a.fix


def test_a_refused_connection_to_a_name_is_not_a_resolution_failure() -> None:
    # Reply 5: the proxy did reach an address for the name, where nothing listened.
    assert kind_of(Outcome.CONNECT_ERROR, socks_refusal(5, "engine.lan:8000")) == "socks_refused"


def test_a_socks_authentication_refusal() -> None:
    obs = failed(Outcome.CONNECT_ERROR, "via:dante", status=None, headers=None, end=0.003,
                 detail=f"ProxyError: {auth_refused('127.0.0.1:1080', 'Invalid username/password')}")  # fmt: skip
    assert kind_of(Outcome.CONNECT_ERROR, obs) == "socks_auth"
    a = one("dante", [judged(obs, ok())])
    assert "refused the authentication" in a.seen and "${USER}" in a.fix


def test_a_proxy_that_is_not_running_gets_the_ordinary_connect_advice() -> None:
    obs = failed(Outcome.CONNECT_ERROR, "via:dante", status=None, headers=None, end=0.003,
                 detail="ConnectError: All connection attempts failed")  # fmt: skip
    assert kind_of(Outcome.CONNECT_ERROR, obs, socks=True) == Outcome.CONNECT_ERROR.value


def socks_cut(quiet: float, *, rep: int = 1) -> Judged:
    events = content(1)
    obs = failed(Outcome.RESET, "via:dante", rep=rep, turn=3, events=events, end=events[-1].t + quiet,
                 detail="reset after 1 content event (1 with content)")  # fmt: skip
    return judged(obs, ok(turn=3, rep=rep, gap=2.0, tokens=3))


def test_a_socks_hop_cutting_a_silent_stream_is_its_idle_timeout() -> None:
    cut = socks_cut(1.0)
    assert kind_of(Outcome.RESET, cut.obs) == "reset_mid_stream"  # not known to be a SOCKS hop
    assert kind_of(Outcome.RESET, cut.obs, socks=True) == "socks_cut"
    (a,) = group([("dante", cut)], socks=frozenset({"dante"})).values()
    assert a.kind == "socks_cut" and "hop dante (a SOCKS5 proxy) closed the connection mid-stream" in a.seen
    assert "idle timeout on relayed connections, about 1.0 s" in a.likely and "Dante timeout.io" in a.likely
    assert "(up to 2.0 s on the direct route)" in a.likely and "gap between tokens" in a.fix
    assert "nginx" not in a.text and "HAProxy" not in a.text


def test_a_socks_cut_right_after_data_is_not_called_an_idle_timeout() -> None:
    (a,) = group([("dante", socks_cut(0.01))], socks=frozenset({"dante"})).values()
    assert "not an idle timeout" in a.likely and "timeout.io" not in a.likely, a.text


def test_a_cut_through_an_http_hop_keeps_its_own_advice() -> None:
    (a,) = group([("edge", socks_cut(1.0))], socks=frozenset({"dante"})).values()
    assert a.kind == "reset_mid_stream" and "nginx proxy_read_timeout" in a.likely and "SOCKS" not in a.text


def test_a_relayed_connection_cut_while_idle_between_turns() -> None:
    obs = failed(Outcome.RESET, "via:dante", turn=2, headers=None, end=0.002, reused=True, idle=4.0,
                 detail="reset before the response headers")  # fmt: skip
    (a,) = group([("dante", judged(obs, ok(turn=2)))], socks=frozenset({"dante"})).values()
    assert "idle for 4.0 s" in a.seen and "pauses between turns" in a.likely and "Dante timeout.io" in a.likely


# -- WebSocket sessions ------------------------------------------------------------------------------


def socket_turn(outcome: Outcome, **kw) -> Observation:  # type: ignore[no-untyped-def]
    return replace(failed(outcome, **kw), transport="websocket")


def test_a_refused_upgrade_names_the_forwarding_lines_and_an_engine_error_stays_the_engines() -> None:
    refused = socket_turn(Outcome.HTTP_ERROR, status=405, events=(), detail="HTTP 405: Method Not Allowed")
    assert kind_of(Outcome.HTTP_ERROR, refused) == "ws_upgrade_refused"
    a = one("nginx", [judged(refused, ok())])
    assert "answered the WebSocket upgrade with HTTP 405" in a.seen and "proxy_set_header Upgrade" in a.likely
    # The same status over HTTP is the hop's error as before; an engine's own error is the engine's.
    assert kind_of(Outcome.HTTP_ERROR, failed(Outcome.HTTP_ERROR, status=405)) == "http_405"
    engine = socket_turn(Outcome.HTTP_ERROR, status=400, response_headers=(("x-proxycheck-request-sha256", "ab"),))
    assert kind_of(Outcome.HTTP_ERROR, engine) == "engine_http_400"


def test_an_upgrade_never_answered_and_an_idle_cut_name_their_settings() -> None:
    swallowed = socket_turn(Outcome.STALL_BEFORE_HEADERS, status=None, headers=None, end=30.0)
    assert kind_of(Outcome.STALL_BEFORE_HEADERS, swallowed) == "ws_upgrade_unanswered"
    assert "never answered the WebSocket upgrade within 30.0 s" in one("tls", [judged(swallowed, ok())]).seen
    idle = socket_turn(Outcome.RESET, headers=None, status=None, end=3.1,
                       detail="the socket was cut without a close frame (1006) 3.1 s after the last turn ended, "
                              "while it sat idle (the recording: ...)")  # fmt: skip
    assert kind_of(Outcome.RESET, idle) == "ws_idle_cut"
    a = one("nginx", [judged(idle, ok())])
    assert "while it sat idle between turns after 3.1 s of silence" in a.seen
    assert "nginx proxy_read_timeout" in a.likely and "HAProxy timeout tunnel" in a.likely
    # A cut mid-answer on a socket is a cut mid-stream, read as such.
    mid = socket_turn(Outcome.RESET, events=content(3), detail="the socket was closed by the server (1011) mid-answer")
    assert kind_of(Outcome.RESET, mid) == "reset_mid_stream"


def test_turns_not_sent_point_at_the_turn_that_ended_the_socket() -> None:
    gone = socket_turn(Outcome.RESET, headers=None, status=None, end=0.0, detail="not sent: the socket was cut")
    assert kind_of(Outcome.RESET, gone) == "ws_not_sent"
    assert "not sent" in one("edge", [judged(gone, ok())]).seen
    assert kind_of(Outcome.RESET, replace(gone, transport="http")) == "reset_before_headers"


# -- a cap on a WebSocket's life --------------------------------------------------------------
#
# A socket carries a whole session: each turn answers in 1 s, then the client thinks. A hop that
# caps a connection's life ends every socket at one time after it opened, idle or not; an idle
# timeout ends it at one time after its last message. The replay says a socket ended while the
# next turn waited with how long it had been idle (`ended_idle`).

CUT_WORDS = "the socket was cut without a close frame (1006)"


def socket_replay(route: str, rep: int, session: str, thinks: list[float], *, life: float | None = None,
                  idle_cut: float | None = None) -> list[Observation]:  # fmt: skip
    """The turns of one replayed socket: turn k answered in 1 s, then `thinks[k-1]` s of thinking;
    ended by the chain `life` s after it opened, or after `idle_cut` s of silence: the turn the
    end fell before is a reset `ended_idle` words, the turns after it not sent."""
    out: list[Observation] = []
    opened = start = rep * 100.0
    ended = False
    for turn in range(1, len(thinks) + 2):
        gone = dict(route=route, turn=turn, session=session, rep=rep, headers=None, status=None, end=0.0)
        if turn > 1:
            prev_end = start + 1.0
            start = prev_end + thinks[turn - 2]
            cut = opened + life if life is not None else prev_end + idle_cut if idle_cut is not None else None
            if not ended and cut is not None and cut < start:
                ended = True
                said = ended_idle(CUT_WORDS, cut - prev_end, waiting=True)
                out.append(replace(socket_turn(Outcome.RESET, **gone, detail=said), t_start=start))  # type: ignore[arg-type]
                continue
        if ended:
            said = "not sent: the socket was cut"
            out.append(replace(socket_turn(Outcome.RESET, **gone, detail=said), t_start=start))  # type: ignore[arg-type]
            continue
        out.append(replace(ok(route, turn=turn, session=session, rep=rep, ttft=0.1, gap=0.09), t_start=start,
                           transport="websocket"))  # fmt: skip
    return out


THINKS = {"s1": [3.0, 2.0, 4.0], "s2": [1.5, 5.0, 2.0]}  # lives on direct: 13 s and 12.5 s


def socket_run(reps: int = 2, **cut) -> tuple[list[Judged], dict[str, list[Judged]]]:  # type: ignore[no-untyped-def]
    """The failing turns of route via:lb (each with its direct twin), and the context of both routes."""
    context: dict[str, list[Judged]] = {"direct": [], "via:lb": []}
    failing: list[Judged] = []
    for rep in range(1, reps + 1):
        for session, thinks in THINKS.items():
            direct = {o.turn: o for o in socket_replay("direct", rep, session, thinks)}
            context["direct"] += [judged(o) for o in direct.values()]
            for o in socket_replay("via:lb", rep, session, thinks, **cut):
                j = judged(o, direct[o.turn])
                context["via:lb"].append(j)
                if o.outcome is Outcome.RESET and not o.detail.startswith("not sent"):
                    failing.append(j)
    return failing, context


def test_sockets_ended_at_one_time_after_they_opened_idle_or_not_are_a_cap_on_their_life() -> None:
    failing, context = socket_run(life=6.0)
    assert len(failing) == 4 and {j.obs.turn for j in failing} == {3}
    a = one("lb", failing, context)
    assert a.kind == "ws_idle_cut"
    assert "while it sat idle between turns after 1.0-2.5 s of silence" in a.seen, a.seen
    assert a.likely.startswith("a cap on a WebSocket's life of about 6.0 s from its opening, not an idle timeout"), a.likely
    assert "stayed open 12.5-13.0 s on the direct route" in a.likely and "GCP load balancer" in a.likely
    assert "raise the cap above the longest session (13.0 s on the direct route here)" in a.fix


def test_sockets_ended_after_equal_silences_are_an_idle_timeout_not_a_cap() -> None:
    failing, context = socket_run(idle_cut=1.2)  # s1 cut before turn 2 (3 s think), s2 before turn 3
    a = one("lb", failing, context)
    assert "after 1.2 s of silence" in a.seen and "nginx proxy_read_timeout" in a.likely, a.likely
    assert "cap" not in a.likely


def test_no_cap_from_one_replay_nor_when_a_socket_of_the_route_lived_longer() -> None:
    failing, context = socket_run(reps=1, life=6.0)  # both cut at one moment of one replay: a restart fits
    assert "cap" not in one("lb", failing, context).likely
    failing, context = socket_run(life=6.0)
    # A third socket on the route ran its whole session, 13 s: a cap at 6 s would have ended it.
    lived = [judged(o, o) for rep in (1, 2) for o in socket_replay("via:lb", rep, "s3", THINKS["s1"])]
    context["via:lb"] += lived
    assert "cap" not in one("lb", failing, context).likely
