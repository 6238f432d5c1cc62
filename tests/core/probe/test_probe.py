"""The probes' pure core: the ladder search, the token budget, request bodies, delivery, owners,
the JSON document, and the reference engine's timing extension (synth)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxycheck.core.probe.findings import (
    ENGINE,
    SCHEMA,
    Evidence,
    ProbeReport,
    ProbeResult,
    RouteInfo,
    attribute,
    cell_text,
    document,
    exit_failed,
)
from proxycheck.core.probe.searches import DIALECTS, Ask, Delivery, Ladder, TokenBudget, filler, request_body
from proxycheck.core.testbed import synth


def search(ladder: Ladder, passes, width: int = 1) -> Ladder:
    """Drive a ladder to its end with a pass/fail oracle."""
    for _ in range(1000):
        values = ladder.next(width if ladder.hi is not None else len(ladder.steps))
        if not values:
            return ladder
        for v in values:
            ladder.feed(v, passes(v))
    raise AssertionError("the ladder did not converge")


# --- Ladder ------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(min_value=400, max_value=(16 << 20) - 1))
def test_a_size_ladder_brackets_the_limit_within_its_tolerance(limit: int) -> None:
    ladder = search(Ladder(4096, 16 << 20, growth=4, floor=300, rel_tol=0.05), lambda v: v <= limit)
    assert ladder.lo <= limit < ladder.hi
    assert ladder.hi - ladder.lo <= max(0.05 * ladder.lo, 1)
    assert (limit - ladder.lo) <= 0.1 * limit  # the 10% the probe promises
    assert ladder.tried <= 20


@settings(max_examples=200, deadline=None)
@given(limit=st.floats(min_value=0.1, max_value=29.9), width=st.integers(min_value=1, max_value=4))
def test_a_time_ladder_brackets_the_limit_within_half_a_second(limit: float, width: int) -> None:
    ladder = search(Ladder(1, 30, growth=2, abs_tol=0.5, quantum=0.05), lambda v: v <= limit, width)
    assert ladder.lo <= limit < ladder.hi
    assert ladder.hi - ladder.lo <= 0.5 + 1e-9


def test_no_limit_up_to_the_bound_and_a_limit_below_the_first_step() -> None:
    none = search(Ladder(1024, 65536, rel_tol=0.05), lambda v: True)
    assert none.hi is None and none.lo == 65536 and none.done
    assert none.steps == (1024, 2048, 4096, 8192, 16384, 32768, 65536)
    low = search(Ladder(1, 30, abs_tol=0.5, quantum=0.05), lambda v: False)
    assert low.lo == 0 and low.hi <= 0.5
    ints = search(Ladder(2, 64, growth=4, floor=1, rel_tol=0.1), lambda v: v <= 5)
    assert (ints.lo, ints.hi) == (5, 6) and all(isinstance(v, int) for v in ints.results)


def test_a_start_beyond_the_bound_tries_the_bound() -> None:
    ladder = Ladder(4096, 1000, floor=300, rel_tol=0.05)
    assert ladder.steps == (1000,)
    with pytest.raises(ValueError):
        Ladder(1, 5, floor=5)


def test_confirm_retries_the_failure_that_ends_the_search() -> None:
    ladder = Ladder(2, 64, growth=4, floor=1, rel_tol=0.1, confirm=True)
    seen: list[float] = []
    flaky_once = {8}

    def passes(v: float) -> bool:
        seen.append(v)
        if v in flaky_once:  # fails the first time only: an unlucky drop, not a limit
            flaky_once.discard(v)
            return False
        return v <= 20

    search(ladder, passes)
    assert ladder.lo == 20 and ladder.hi in (21, 22)  # within 10%
    assert 8 in ladder.flaky and ladder.inconsistent
    assert seen.count(ladder.hi) == 2  # the final failure was tried twice


def test_needless_and_forget() -> None:
    ladder = Ladder(1, 16, abs_tol=0.5, quantum=0.05)
    values = ladder.next(10)
    assert values == [1.0, 2.0, 4.0, 8.0, 16.0]
    ladder.feed(4.0, False)
    assert ladder.needless(8.0) and not ladder.needless(2.0)
    ladder.forget(8.0)
    ladder.forget(16.0)
    ladder.feed(1.0, True)
    ladder.feed(2.0, True)
    assert ladder.next(3) == [2.5, 3.0, 3.5]


# --- budget and bodies -------------------------------------------------------------------------


def test_the_budget_refuses_what_it_cannot_pay_for() -> None:
    budget = TokenBudget(10)
    assert budget.take(6) and not budget.take(5) and budget.exhausted and budget.spent == 6
    assert budget.take(4) and budget.spent == 10
    assert TokenBudget(None).take(10**9)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("size", [1, 300, 4096, 100_000, 1 << 20])
def test_request_bodies_are_valid_json_of_exactly_the_size_asked(dialect: str, size: int) -> None:
    body = request_body(dialect, Ask(3, ttft=0.0, token_interval=1.5), model="m", nonce="n1", size=size,
                        reference=True)  # fmt: skip
    doc = json.loads(body)
    unpadded = request_body(dialect, Ask(3, ttft=0.0, token_interval=1.5), model="m", nonce="n1", reference=True)
    assert len(body) == max(size, len(unpadded))
    assert doc["stream"] is True and doc["proxycheck"] == {"ttft": 0.0, "token_interval": 1.5}
    assert synth.max_tokens_of(dialect, doc) == 3


def test_ignore_eos_extension_and_nonce() -> None:
    chat = json.loads(request_body("openai_chat", Ask(5, token_interval=2.0), model="m", nonce="a"))
    assert chat["ignore_eos"] is True and "proxycheck" not in chat  # not the reference engine
    sglang = json.loads(request_body("sglang_generate", Ask(5), model="m", nonce="a"))
    assert sglang["sampling_params"] == {"max_new_tokens": 5, "ignore_eos": True}
    anthropic = json.loads(request_body("anthropic_messages", Ask(5), model="m", nonce="a"))
    assert "ignore_eos" not in anthropic  # the Messages API refuses unknown members
    assert request_body("openai_chat", Ask(1), model="m", nonce="a") != request_body(
        "openai_chat", Ask(1), model="m", nonce="b"
    )
    assert len(filler(1000)) == 1000 and json.dumps(filler(1000)) == f'"{filler(1000)}"'
    with pytest.raises(ValueError):
        request_body("grpc", Ask(1), model="m", nonce="a")


# --- delivery ----------------------------------------------------------------------------------


def test_delivery_kinds() -> None:
    paced = Delivery.of(0.05 * i for i in range(20))
    assert (paced.events, paced.groups) == (20, 20) and paced.kind(20) == "streamed"
    burst = Delivery.of([1.0] * 20)
    assert (burst.groups, burst.spread) == (1, 0.0) and burst.kind(20) == "buffered"
    chunks = Delivery.of([0.2] * 5 + [0.4] * 5 + [0.6] * 5 + [0.8] * 5)
    assert chunks.groups == 4 and chunks.kind(20) == "batched"
    assert paced.kind(2) == "unknown" and Delivery.of([]).kind(20) == "unknown"


# --- the reference engine's timing extension ---------------------------------------------------


def test_the_timing_extension_replaces_the_timing_model() -> None:
    timing = synth.Timing(ttft_base=0.05, ttft_per_kb=0.002, interval=0.02)
    plain = {"model": "m", "messages": [], "max_tokens": 2}
    asked = {**plain, "proxycheck": {"ttft": 0.0, "token_interval": 3.0}}
    p = synth.plan("openai_chat", plain, json.dumps(plain).encode(), timing)
    q = synth.plan("openai_chat", asked, json.dumps(asked).encode(), timing)
    assert (p.ttft, p.interval) != (0.0, 3.0) and (q.ttft, q.interval) == (0.0, 3.0)
    only = {**plain, "proxycheck": {"token_interval": 1}}
    assert synth.timing_extension(only) == (None, 1.0)
    for bad in ([], {"ttft": -1}, {"ttft": True}, {"token_interval": 1e9}, {"pace": 1}):
        with pytest.raises(ValueError):
            synth.timing_extension({"proxycheck": bad})


# --- owners, words, the document -----------------------------------------------------------------


ROUTES = (RouteInfo("direct"), RouteInfo("via:inner", ("inner",)), RouteInfo("via:outer", ("outer", "inner")))


def report(*results: ProbeResult, routes: tuple[RouteInfo, ...] = ROUTES) -> ProbeReport:
    return ProbeReport(chain="c.toml", engine="http://e", reference=True, dialect="openai_chat", model="m",
                       routes=routes, probes=("body", "header", "sse"), bounds={"body": 1 << 20},
                       results=results)  # fmt: skip


def limit(route: str, value: float, failed_at: float, probe: str = "body") -> ProbeResult:
    return ProbeResult(route, probe, "limit", value=value, failed_at=failed_at, bound=1 << 20,
                       evidence=Evidence(failed_at, "http_error", 413, "HTTP 413"))  # fmt: skip


def none(route: str, probe: str = "body") -> ProbeResult:
    return ProbeResult(route, probe, "none", value=1 << 20, bound=1 << 20)


def owners(rep: ProbeReport) -> dict[tuple[str, str], tuple[str | None, bool]]:
    return {(o.result.route, o.result.probe): (o.owner, o.inherited) for o in attribute(rep)}


def test_a_limit_belongs_to_the_innermost_route_where_it_appears() -> None:
    rep = report(none("direct"), none("via:inner"), limit("via:outer", 99_000, 102_000))
    assert owners(rep)[("via:outer", "body")] == ("outer", False)
    assert exit_failed(rep)
    # The same limit further out is inherited; a stricter one is the outer hop's.
    rep = report(none("direct"), limit("via:inner", 99_000, 102_000), limit("via:outer", 99_500, 101_000))
    assert owners(rep)[("via:outer", "body")] == ("inner", True)
    rep = report(none("direct"), limit("via:inner", 99_000, 102_000), limit("via:outer", 40_000, 42_000))
    assert owners(rep)[("via:outer", "body")] == ("outer", False)


def test_the_engines_limits_are_the_engines_and_do_not_fail_the_chain() -> None:
    rep = report(*(limit(r.name, 7936, 8192, "header") for r in ROUTES))
    got = owners(rep)
    assert got[("direct", "header")] == (ENGINE, False)
    assert got[("via:inner", "header")] == (ENGINE, True) and got[("via:outer", "header")] == (ENGINE, True)
    assert not exit_failed(rep)
    doc = document(rep)
    assert doc["schema"] == SCHEMA and doc["healthy"] is True
    assert [f["belongs_to"] for f in doc["findings"]] == [ENGINE]


def test_kinds_failures_and_skipped_routes() -> None:
    sse = [ProbeResult("direct", "sse", "none", kind="streamed"),
           ProbeResult("via:inner", "sse", "degraded", kind="buffered"),
           ProbeResult("via:outer", "sse", "degraded", kind="buffered")]  # fmt: skip
    got = owners(report(*sse))
    assert got[("via:inner", "sse")] == ("inner", False) and got[("via:outer", "sse")] == ("inner", True)
    failed = ProbeResult("via:outer", "body", "failed", evidence=Evidence(None, "reset"), detail="reset")
    assert owners(report(none("direct"), none("via:inner"), failed))[("via:outer", "body")] == ("outer", False)
    # With via:inner not probed, the hops between direct and via:outer are all candidates.
    rep = report(none("direct"), limit("via:outer", 1, 2), routes=(ROUTES[0], ROUTES[2]))
    assert owners(rep)[("via:outer", "body")] == ("outer or inner", False)
    # A route inside stopped by the budget below the failure: it may own the limit as well.
    short = ProbeResult("via:inner", "body", "incomplete", value=1000, bound=1 << 20)
    rep = report(none("direct"), short, limit("via:outer", 4000, 5000))
    assert owners(rep)[("via:outer", "body")] == ("outer or inner or engine", False)
    rep = report(none("direct"), short, limit("via:outer", 400, 500))
    assert owners(rep)[("via:outer", "body")] == ("outer", False)
    # Without direct, the engine is a candidate too.
    rep = report(limit("via:inner", 1, 2), routes=(ROUTES[1],))
    assert owners(rep)[("via:inner", "body")] == ("inner or engine", False)


def test_cells_and_the_document() -> None:
    assert cell_text(limit("via:outer", 99_328, 102_400)) == "97.0 KiB ok; HTTP 413 at 100 KiB"
    assert cell_text(none("direct")) == "none ≤ 1.0 MiB"
    idle = ProbeResult("d", "idle", "limit", value=2.5, failed_at=3.0, evidence=Evidence(3.0, "stall_before_headers"))
    assert cell_text(idle) == "stall_before_headers after 3.00 s idle (ok at 2.50 s)"
    assert cell_text(ProbeResult("d", "gap", "incomplete", value=4.0)) == "none ≤ 4.00 s (budget)"
    assert cell_text(ProbeResult("d", "gap", "skipped", detail="token budget spent")) == "skipped (token budget spent)"
    doc = document(report(none("direct"), limit("via:inner", 99_000, 102_000), none("via:outer")))
    json.dumps(doc)
    assert doc["healthy"] is False and doc["complete"] is True
    first = doc["results"][1]
    assert first["route"] == "via:inner" and first["belongs_to"] == "inner" and first["unit"] == "bytes"
    assert first["evidence"] == {"at": 102_000, "outcome": "http_error", "status": 413, "detail": "HTTP 413"}
