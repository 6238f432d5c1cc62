"""The trace's rules, values in and verdict out: each rule that places a failure, and what tries
to fool it (a point not recording, a point that misses exchanges anyway, an exchange still in
flight when its recording ended, a hop's retry, a hop that hung up on the inner side, clocks
apart, identical requests, an exchange not recorded to the end)."""

from __future__ import annotations

import json
from dataclasses import replace

from proxycheck.core.diagnose.verdict import HEALTHY, INCONCLUSIVE, NOT_REPRODUCED, PROXY, SERVER, Verdict
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.points.matching import PointLog
from proxycheck.core.points.seen import Seen, request_key
from proxycheck.core.points.trace import INSIDE, LOST, UNKNOWN, placed_by_points, trace


def body(n: int) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": f"question {n}"}], "stream": True}).encode()


def seen(n: int, t: float, *, outcome: Outcome = Outcome.OK, events: int = 10, latency: float = 0.0,
         error: str | None = None, ended: float | None = 1.0, xid: int | None = None, raw: bytes | None = None) -> Seen:  # fmt: skip
    ok = outcome is Outcome.OK
    times = tuple(t + latency + 0.1 + 0.01 * i for i in range(events))
    return Seen(
        xid=xid if xid is not None else n, label=f"s{n}", turn=1, method="POST", path="/v1/chat/completions",
        key=request_key(raw or body(n)), t_request=t, t_response=t + latency + 0.05,
        t_ended=None if ended is None else t + latency + ended, status=200, streamed=True, events=events + ok,
        content_events=events, bytes=100 * events, first_content=times[0] if times else None,
        last_byte=times[-1] if times else t + latency + 0.05, terminal=ok, finish=ok, outcome=outcome, detail="",
        content_times=times, error=error,
    )  # fmt: skip


def point(name: str, items: list[Seen], *, started_at: float = 1000.0, until: float | None = 100.0,
          position: int | None = None, covered: tuple[tuple[float, float | None], ...] | None = None) -> PointLog:  # fmt: skip
    return PointLog(name, started_at, tuple(items), covered if covered is not None else ((0.0, until),), position)


STALL = dict(outcome=Outcome.STALL_MID_STREAM, events=4, ended=30.0, error="client disconnected")


def client_and_engine(failing_inner: Seen | None, *, positions: bool = False, **inner_kw: object) -> tuple[PointLog, PointLog]:
    outer = [seen(1, 1.0, latency=0.002), seen(2, 2.0, **STALL), seen(3, 40.0, latency=0.002)]  # type: ignore[arg-type]
    inner = [seen(1, 1.001), seen(3, 40.001)] + ([failing_inner] if failing_inner else [])
    return (point("client-side", outer, position=0 if positions else None),
            point("engine-side", inner, position=1 if positions else None, **inner_kw))  # type: ignore[arg-type]


def hops(outer: int, inner: int) -> tuple[str, ...]:
    return ("edge",)[outer:inner]


def test_a_stream_complete_inside_and_stalled_outside_was_lost_between_the_points() -> None:
    a, b = client_and_engine(seen(2, 2.001))
    result = trace([a, b])
    assert result.verdict == PROXY and result.segment is not None
    assert (result.segment.outer, result.segment.inner, result.segment.hops) == ("client-side", "engine-side", None)
    lost = [t for t in result.tracks if t.locus.kind == LOST]
    assert [t.name.label for t in lost] == ["s2"]
    assert "lost between engine-side and client-side" in lost[0].line
    assert result.pairs[0].diverged["stalled"] == 1


def test_with_the_chain_placing_both_points_the_segment_names_its_hop() -> None:
    a, b = client_and_engine(seen(2, 2.001), positions=True)
    result = trace([b, a], 1, hops)  # given in either order: the chain orders them
    assert result.order == "chain" and result.culprit == "edge" and result.segment.hops == ("edge",)  # type: ignore[union-attr]


def test_a_failure_already_at_the_innermost_point_is_the_server_only_when_it_stands_in_front_of_the_engine() -> None:
    inner_failure = seen(2, 2.001, **STALL)  # type: ignore[arg-type]
    placed = trace(list(client_and_engine(inner_failure, positions=True)), 1, hops)
    assert placed.verdict == SERVER and placed.culprit == "engine"
    unplaced = trace(list(client_and_engine(inner_failure)))
    assert unplaced.verdict == INCONCLUSIVE and unplaced.culprit is None
    assert [t.locus.kind for t in unplaced.tracks if t.locus.kind != "fine"] == [INSIDE]


def test_an_exchange_missing_inside_is_lost_only_while_the_inner_point_recorded_and_missed_nothing_else() -> None:
    a, b = client_and_engine(None)
    assert trace([a, b]).verdict == PROXY  # it never reached the inner point: a hop kept or refused it
    a, b = client_and_engine(None, covered=((0.0, 1.5), (39.0, 100.0)))  # not recording at t=2
    not_recording = trace([a, b])
    assert not_recording.verdict == INCONCLUSIVE and "was not recording then" in not_recording.notes[-1]
    # The inner point also misses an exchange the outer one completed: absence says nothing.
    outer = [seen(1, 1.0), seen(2, 2.0, **STALL), seen(3, 40.0), seen(4, 50.0)]  # type: ignore[arg-type]
    misses = trace([point("client-side", outer), point("engine-side", [seen(1, 1.001), seen(3, 40.001)])])
    assert misses.verdict == INCONCLUSIVE and any("not taken as lost" in n for n in misses.notes)


def test_an_exchange_still_in_flight_when_its_recording_ended_is_not_placed() -> None:
    outer = [seen(1, 1.0), seen(2, 99.0, outcome=Outcome.IN_FLIGHT, events=3, ended=None)]
    inner = [seen(1, 1.001), seen(2, 99.001)]
    result = trace([point("client-side", outer, until=99.5), point("engine-side", inner, until=99.5)])
    assert result.verdict == INCONCLUSIVE
    assert [t.locus.kind for t in result.tracks if t.locus.kind != "fine"] == [UNKNOWN]


def test_an_exchange_not_recorded_to_the_end_makes_no_verdict() -> None:
    outer = [seen(1, 1.0), seen(2, 2.0, outcome=Outcome.NOT_RECORDED, events=3, ended=None)]
    result = trace([point("client-side", outer), point("engine-side", [seen(1, 1.001), seen(2, 2.001)])])
    assert result.verdict == INCONCLUSIVE and result.segment is None


def test_a_hops_retry_that_completed_is_what_the_inner_point_passed_on() -> None:
    first_try = seen(2, 2.001, outcome=Outcome.RESET, events=2, ended=0.3, xid=20)
    retry = seen(2, 2.5, xid=21)
    a, b = client_and_engine(None)
    b = replace(b, seen=(*b.seen, first_try, retry))
    result = trace([a, b])
    assert result.verdict == PROXY  # the retry completed inside; outside the client got a stall
    assert result.pairs[0].resent == 1
    # A retry that recovered the exchange for the client is no failure at all.
    recovered = replace(a, seen=(a.seen[0], seen(2, 2.0, latency=0.6), a.seen[2]))
    healthy = trace([recovered, b])
    assert healthy.verdict == HEALTHY


def test_a_hop_hanging_up_on_the_inner_side_cut_it_between_the_points_unless_the_client_left_first() -> None:
    hung_up = seen(2, 2.001, outcome=Outcome.RESET, events=0, ended=1.0, error="Client disconnected.")
    outer_cut = [seen(1, 1.0), seen(2, 2.0, outcome=Outcome.RESET, events=0, ended=1.0,
                                     error="peer closed connection without sending complete message body"), seen(3, 40.0)]  # fmt: skip
    inner = [seen(1, 1.001), hung_up, seen(3, 40.001)]
    assert trace([point("client-side", outer_cut), point("engine-side", inner)]).verdict == PROXY
    # The client gave up first and every hop passed its close on: the silence came from inside.
    outer_left = [outer_cut[0], seen(2, 2.0, outcome=Outcome.RESET, events=0, ended=1.0, error="client disconnected"), outer_cut[2]]
    inside = trace([point("client-side", outer_left), point("engine-side", inner)])
    assert inside.verdict == INCONCLUSIVE and inside.places[0][0].outer is None


def test_clocks_apart_and_identical_requests_still_match_one_to_one() -> None:
    twins = [seen(7, t, xid=i) for i, t in enumerate((1.0, 1.2, 5.0, 5.1))]
    twins[2] = seen(7, 5.0, xid=2, **STALL)  # type: ignore[arg-type]
    inner = [replace(s, t_request=s.t_request + 0.001, t_response=(s.t_response or 0) + 0.001) for s in twins]
    inner[2] = seen(7, 5.001, xid=2)
    a = point("client-side", twins + [seen(1, 9.0)])
    b = point("engine-side", inner + [seen(1, 9.001)], started_at=1000.0 - 37.5)  # its clock 37.5 s behind
    result = trace([a, b])
    assert abs(result.offsets[1].seconds + 37.5) < 0.01
    assert result.pairs[0].both == 5
    lost = [t for t in result.tracks if t.locus.kind == LOST]
    assert [(t.name.xid, t.seen[1].xid) for t in lost] == [(2, 2)]  # type: ignore[union-attr]


def test_a_reserialized_body_is_the_same_exchange() -> None:
    doc = json.loads(body(1))
    respelled = json.dumps(doc, indent=2, sort_keys=True).encode()
    result = trace([point("client-side", [seen(1, 1.0)]), point("engine-side", [seen(1, 1.001, raw=respelled)])])
    assert result.verdict == HEALTHY and result.pairs[0].both == 1 and result.pairs[0].reserialized == 1


def test_the_points_are_ordered_by_the_time_each_sees_exchanges_take() -> None:
    a, b = client_and_engine(seen(2, 2.001))
    result = trace([b, a])  # the engine side given first: it sees every exchange take less time
    assert result.order == "timing" and [p.name for p in result.points] == ["client-side", "engine-side"]


def verdict(word: str) -> Verdict:
    return Verdict(word, None, "no route reproduces them", ())


def test_check_takes_the_points_word_only_for_a_failure_the_replay_did_not_bring_back() -> None:
    placed = trace(list(client_and_engine(seen(2, 2.001), positions=True)), 1, hops)
    checked = placed_by_points(verdict(NOT_REPRODUCED), placed)
    assert checked.verdict == PROXY and checked.culprit == "edge"
    assert checked.summary.startswith("seen while recording, not reproduced on replay")
    assert checked.to_json()["segment"] == {"outer": "client-side", "inner": "engine-side", "hops": ["edge"]}
    assert placed_by_points(verdict(HEALTHY), placed).verdict == HEALTHY  # the replay's own verdict stands
    unplaced = trace(list(client_and_engine(None, covered=((0.0, 1.5), (39.0, 100.0)))))
    assert placed_by_points(verdict(NOT_REPRODUCED), unplaced).verdict == NOT_REPRODUCED


def test_identical_requests_a_hop_reordered_are_paired_by_how_they_ended() -> None:
    """Two parallel agents send one body; a hop's jitter swaps their arrival inside. Paired by
    arrival, the failing one would meet the inner point's clean one and blame the wrong hop."""
    same = body(7)

    def at(xid: int, t: float, end: float, ok: bool) -> Seen:
        return replace(seen(7, t, xid=xid, raw=same, outcome=Outcome.OK if ok else Outcome.STALL_MID_STREAM,
                            events=0, error=None if ok else "client disconnected"),
                       t_ended=end, t_response=t + 0.2, last_byte=t + 0.3, content_times=())  # fmt: skip

    anchors = lambda d: [seen(100 + i, 30 + i + d) for i in range(5)]  # noqa: E731
    edge = [at(1, 0.000, 20.0, False), at(2, 0.0175, 1.65, True)] + anchors(0)
    mid = [at(1, 0.038, 20.03, False), at(2, 0.027, 1.64, True)] + anchors(0.01)
    inner = [at(1, 0.042, 1.50, True), at(2, 0.031, 1.62, True)] + anchors(0.012)
    points = [point(name, items, position=i) for i, (name, items) in enumerate((("edge", edge), ("mid", mid), ("inner", inner)))]
    result = trace(points, 2, lambda a, b: ("gateway", "router")[a:b])
    assert result.verdict == PROXY and result.culprit == "router", result.summary
