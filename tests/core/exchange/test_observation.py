"""Observations: exact encode/decode round trips, strict decoding, and the derived metrics."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxycheck.core.exchange.observation import (
    EVENT_KINDS,
    KEPT_HEADERS,
    Event,
    Observation,
    ResultSummary,
    ToolCallSummary,
    decode,
    encode,
    select_headers,
)
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.protocol.result import Choice, Result, ToolCall, Usage

# -- strategies -------------------------------------------------------------------------------------

times = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
opt_times = st.none() | times
counts = st.integers(min_value=0, max_value=2**53)
opt_counts = st.none() | counts
digests = st.binary(max_size=8).map(lambda b: hashlib.sha256(b).hexdigest())

events = st.builds(Event, times, st.integers(min_value=0, max_value=1 << 20), st.sampled_from(EVENT_KINDS))
tool_calls = st.builds(ToolCallSummary, st.none() | st.text(max_size=20), digests, st.booleans())
results = st.builds(
    ResultSummary,
    text_sha256=digests,
    text_len=counts,
    reasoning_len=counts,
    tool_calls=st.lists(tool_calls, max_size=3).map(tuple),
    finish_reason=st.none() | st.text(max_size=12),
    prompt_tokens=opt_counts,
    completion_tokens=opt_counts,
    terminal=st.booleans(),
)
header_pairs = st.lists(st.tuples(st.sampled_from(KEPT_HEADERS), st.text(max_size=40)), max_size=4).map(tuple)

observations = st.builds(
    Observation,
    route=st.text(max_size=20),
    repetition=counts,
    session=st.text(max_size=20),
    turn=counts,
    xid=opt_counts,
    t_start=times,
    connect=opt_times,
    headers=opt_times,
    first_event=opt_times,
    first_content=opt_times,
    end=opt_times,
    events=st.lists(events, max_size=20).map(tuple),
    streamed=st.booleans(),
    status=st.none() | st.integers(min_value=100, max_value=599),
    response_headers=header_pairs,
    request_bytes=counts,
    request_sha256=digests,
    response_bytes=counts,
    result=st.none() | results,
    reused=st.none() | st.booleans(),
    idle=opt_times,
    http_version=st.none() | st.sampled_from(["HTTP/1.0", "HTTP/1.1", "HTTP/2"]),
    connection=st.none() | st.integers(min_value=1, max_value=1000),
    outcome=st.sampled_from(list(Outcome)),
    detail=st.text(max_size=80),
    error=st.text(max_size=80),
)


# -- encode / decode --------------------------------------------------------------------------------


@given(observations)
def test_encode_decode_round_trips_exactly_through_json(obs: Observation) -> None:
    doc = json.loads(json.dumps(encode(obs), allow_nan=False))
    assert decode(doc) == obs


@given(observations)
def test_encoding_is_plain_json_data(obs: Observation) -> None:
    doc = encode(obs)
    # Only JSON's own types: no tuples, enums or dataclasses left for a custom encoder.
    assert json.loads(json.dumps(doc)) == doc


def sample() -> Observation:
    return Observation(
        route="via:edge", repetition=2, session="s1", turn=4, xid=17, t_start=12.5, connect=0.002,
        headers=0.01, first_event=0.05, first_content=0.06, end=0.3,
        events=(Event(0.05, 120, "meta"), Event(0.06, 130, "content"), Event(0.1, 15, "comment"),
                Event(0.16, 130, "content"), Event(0.26, 130, "content"), Event(0.29, 14, "terminal")),
        status=200, response_headers=(("content-type", "text/event-stream"),), request_bytes=900,
        request_sha256="ab" * 32, response_bytes=539,
        result=ResultSummary("cd" * 32, 12, 0, (), "stop", 40, 3, True),
        reused=True, idle=4.5, http_version="HTTP/1.1", connection=2, outcome=Outcome.OK,
    )  # fmt: skip


def test_decode_ignores_fields_a_newer_writer_added() -> None:
    doc = encode(sample())
    doc["server_timing"] = {"queue": 0.01}
    assert decode(doc) == sample()


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("t_start", "soon", "t_start: expected a number"),
        ("turn", True, "turn: expected an integer"),
        ("turn", 4.0, "turn: expected an integer"),
        ("outcome", "wedged", "outcome: 'wedged' is not a valid Outcome"),
        ("events", [[0.1, 5, "burst"]], "events: unknown event kind 'burst'"),
        ("events", [[0.1, 5]], "events: expected a list of 3"),
        ("response_headers", [["via", 1]], "response_headers: expected text"),
        ("result", {"text_len": 1}, "result: result.text_sha256: missing"),
        ("streamed", "yes", "streamed: expected true or false"),
    ],
)
def test_decode_names_the_bad_field(field: str, value: object, message: str) -> None:
    doc = encode(sample())
    doc[field] = value
    with pytest.raises(ValueError) as err:
        decode(doc)
    assert message in str(err.value)


def test_decode_requires_the_fields_it_cannot_default() -> None:
    doc = encode(sample())
    del doc["outcome"]
    with pytest.raises(ValueError, match="outcome: missing"):
        decode(doc)
    with pytest.raises(ValueError, match="not a JSON object"):
        decode([1, 2])  # type: ignore[arg-type]


def test_with_keys_sets_only_the_run_level_keys() -> None:
    bare = Observation(t_start=1.0, outcome=Outcome.RESET, detail="x")
    keyed = bare.with_keys(route="direct", repetition=1, session="s2", turn=3, xid=9)
    assert keyed.key == ("direct", 1, "s2", 3, 9)
    assert (keyed.t_start, keyed.outcome, keyed.detail) == (1.0, Outcome.RESET, "x")


# -- metrics ----------------------------------------------------------------------------------------


def test_metrics_of_a_stream() -> None:
    obs = sample()
    assert obs.ttft == 0.06
    assert obs.e2e == 0.29  # the terminal event, not the end of the exchange
    assert obs.content_times == (0.06, 0.16, 0.26)
    assert obs.itl == pytest.approx((0.1, 0.1))  # comments are not content: no gap at 0.1
    assert obs.content_events == 3 and obs.comments == 1
    assert obs.output_tokens == 3
    assert obs.tpot == pytest.approx((0.29 - 0.06) / 2)


def test_no_terminal_no_e2e_and_no_tpot() -> None:
    obs = Observation(t_start=0.0, first_content=0.1, end=5.0, events=(Event(0.1, 10, "content"),),
                      result=ResultSummary("00", 1, completion_tokens=5), outcome=Outcome.STALL_MID_STREAM)
    assert obs.e2e is None and obs.tpot is None and obs.itl == ()


def test_a_non_streamed_answer_ends_at_its_body() -> None:
    obs = Observation(t_start=0.0, streamed=False, headers=0.4, first_content=0.41, end=0.41,
                      result=ResultSummary("00", 20, completion_tokens=8, terminal=True), outcome=Outcome.OK)
    assert obs.ttft == 0.41 and obs.e2e == 0.41 and obs.tpot == 0.0 and obs.itl == ()


@pytest.mark.parametrize("tokens", [None, 0, 1])
def test_tpot_needs_two_tokens(tokens: int | None) -> None:
    obs = sample()
    assert obs.result is not None
    obs = replace(obs, result=replace(obs.result, completion_tokens=tokens))
    assert obs.tpot is None


def test_result_summary_keeps_digests_and_sizes_not_text() -> None:
    calls = (ToolCall.build(0, "c1", "read_file", '{"path": "a.py"}'), ToolCall.build(1, "c2", "run", "{oops"))
    result = Result("openai_chat", (Choice(0, "héllo", "because", calls, "tool_calls"),),
                    Usage(prompt_tokens=30, completion_tokens=9), terminal=True)
    summary = ResultSummary.of(result)
    assert summary.text_sha256 == hashlib.sha256("héllo".encode()).hexdigest()
    assert (summary.text_len, summary.reasoning_len) == (5, 7)
    assert summary.tool_calls == (
        ("read_file", hashlib.sha256(b'{"path": "a.py"}').hexdigest(), True),
        ("run", hashlib.sha256(b"{oops").hexdigest(), False),
    )
    assert (summary.finish_reason, summary.prompt_tokens, summary.completion_tokens) == ("tool_calls", 30, 9)
    assert summary.terminal
    assert ResultSummary.of(Result("openai_chat")).completion_tokens is None


def test_select_headers_keeps_the_telling_ones_in_lower_case() -> None:
    got = select_headers([("Via", "1.1 edge"), ("Set-Cookie", "s=1"), ("X-Accel-Buffering", "no"),
                          ("x-proxycheck-request-sha256", "ab"), ("Date", "today")])
    assert got == (("via", "1.1 edge"), ("x-accel-buffering", "no"), ("x-proxycheck-request-sha256", "ab"))
    obs = Observation(t_start=0.0, response_headers=got, outcome=Outcome.OK)
    assert obs.response_header("VIA") == "1.1 edge" and obs.response_header("server") is None
