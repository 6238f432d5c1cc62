"""The differ: each exchange observed on a route, judged against the same exchange on the
reference route (normally `direct`, straight to the engine), beyond a measured noise floor.

It owns three things (DESIGN.md, "Outcomes" and "Localization"):

* `burstiness`: how a stream's content events arrived (1.0 = one by one, N = all N at once);
* `noise_floor`: how much the reference route differs from itself between repetitions (content,
  latency, burstiness, token counts): differences within it are noise, not a hop's doing;
* `judge`: one `Judged` per observation: its own failure unchanged, else `content_mismatch`,
  `buffered`, `slow` or `ok` from the comparison with the reference exchange.

An exchange is keyed by (session, turn, xid); the reference for an observation is the same key
on the reference route, in the same repetition when that one is OK (the closest conditions:
same think times, same server warmth), else in any repetition where it was OK.

Pure: values in, values out; no clocks, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Iterable, Sequence

from proxycheck.core.observation import Observation, ResultSummary, ToolCallSummary
from proxycheck.core.outcomes import Outcome
from proxycheck.core.stats import percentile
from proxycheck.core.verdict import Judged, NoiseFloor

ExchangeKey = tuple[str, int, int | None]  # (session, turn, xid)

BURST_WINDOW = 0.002  # seconds: events closer than this arrived in one read, i.e. together

# Buffering: a stream must average at least this many content events per burst to count as
# buffered (two events sharing a TCP segment now and then is normal), and be burstier than the
# reference by more than max(BUFFER_RATIO, 2 x the floor's own burst ratio). Streams of fewer
# than BUFFER_MIN_EVENTS content events are not judged: an engine that now and then writes two
# or three tokens at once makes a 3..9-event answer look like one or two bursts by chance, and
# holding back so short an answer costs a user nothing they could notice. (A buffering hop shows
# on the longer answers of the same route: nginx's 4-8 KB buffers hold tens of events each.)
BUFFER_MIN_BURST = 3.0
BUFFER_RATIO = 2.0
BUFFER_MIN_EVENTS = 10

# Slowness: a delay counts when it exceeds all of: 3 x the noise floor, 25 % of the reference
# time (engines' latency scales with the work) and 50 ms (below that, a hop's connection set-up
# or a scheduler hiccup, nothing a user notices). The noise floor applied is the larger of the
# run's (p95 over all exchanges) and this exchange's own spread across the reference's
# repetitions: the run's floor is an absolute time dominated by the typical exchange, so on an
# exchange several times longer than most, ordinary jitter (±20 % gives up to 1.5x) exceeds it.
SLOW_FLOOR_FACTOR = 3.0
SLOW_RELATIVE = 0.25
SLOW_ABSOLUTE = 0.05

# A degradation is a hop's habit, not an accident: on a route it counts only when at least this
# share of the exchanges where it could show (compared with a reference; for buffering, long
# enough to judge) do show it. A hop that buffers or slows does so to most of what it carries; a
# burst or a delay on 2 of 18 exchanges is the machine (a process descheduled, a collection
# pause), and blaming a hop for it is a false alarm.
SYSTEMATIC_SHARE = 0.5

# Non-deterministic content: completion tokens may differ by twice the floor's spread plus two
# (an end-of-text token counted or not, on either side) before it counts as a different answer.
TOKENS_FLOOR_FACTOR = 2
TOKENS_SLACK = 2


def exchange_key(obs: Observation) -> ExchangeKey:
    """Which exchange of the recording an observation is, whatever its route and repetition."""
    return (obs.session, obs.turn, obs.xid)


# -- burstiness ------------------------------------------------------------------------------------


def burstiness(obs: Observation, window: float = BURST_WINDOW) -> float | None:
    """Mean number of content events per arrival burst: an event within `window` seconds of the
    previous content event joins its burst. 1.0 = every event arrived on its own (streaming);
    N = all N arrived at once (a buffering hop). None with fewer than 2 content events."""
    shape = _bursts(obs, window)
    return None if shape is None else shape[0] / shape[1]


def _bursts(obs: Observation, window: float = BURST_WINDOW) -> tuple[int, int] | None:
    """(content events, bursts), or None with fewer than 2 content events."""
    events = bursts = 0
    prev = 0.0
    for e in obs.events:
        if e.kind != "content":
            continue
        if events == 0 or e.t - prev > window:
            bursts += 1
        events += 1
        prev = e.t
    return (events, bursts) if events >= 2 else None


# -- noise floor -----------------------------------------------------------------------------------


def noise_floor(reference: Sequence[Observation], route: str = "direct") -> NoiseFloor:
    """How much `route` differs from itself across repetitions.

    `reference` may hold any observations; those of `route` with outcome OK count. Exchanges are
    matched by (session, turn, xid) across repetitions; `pairs` counts the exchanges seen OK in
    two or more repetitions. With no pairs the floor is zero and not deterministic, so content
    is then compared structurally only (one run cannot show whether the engine samples).
    """
    groups = _group_ok(o for o in reference if o.route == route)
    ttft_diffs: list[float] = []
    e2e_diffs: list[float] = []
    burst = 1.0
    tokens = 0
    pairs = 0
    deterministic = True
    for reps in groups.values():
        runs = list(reps.values())
        if len(runs) < 2:
            continue
        pairs += 1
        first = _content_signature(runs[0].result)
        if any(_content_signature(o.result) != first for o in runs[1:]):
            deterministic = False
        bursts = [burstiness(o) for o in runs]
        for (x, bx), (y, by) in combinations(zip(runs, bursts), 2):
            _add_abs_diff(ttft_diffs, x.ttft, y.ttft)
            _add_abs_diff(e2e_diffs, x.e2e, y.e2e)
            if bx is not None and by is not None:
                burst = max(burst, max(bx, by) / min(bx, by))
            tx, ty = x.output_tokens, y.output_tokens
            if tx is not None and ty is not None:
                tokens = max(tokens, abs(tx - ty))
    return NoiseFloor(
        reference=route,
        pairs=pairs,
        deterministic=deterministic and pairs > 0,
        ttft=percentile(ttft_diffs, 95) or 0.0,
        e2e=percentile(e2e_diffs, 95) or 0.0,
        burst=burst,
        tokens=tokens,
    )


def _group_ok(observations: Iterable[Observation]) -> dict[ExchangeKey, dict[int, Observation]]:
    """OK observations by exchange, then by repetition (the first of a repetition wins), with
    repetitions in ascending order."""
    groups: dict[ExchangeKey, dict[int, Observation]] = {}
    for o in observations:
        if o.outcome is not Outcome.OK:
            continue
        groups.setdefault(exchange_key(o), {}).setdefault(o.repetition, o)
    return {k: dict(sorted(reps.items())) for k, reps in groups.items()}


def _content_signature(result: ResultSummary | None) -> tuple[str, tuple[tuple[str | None, str], ...]] | None:
    if result is None:
        return None
    return (result.text_sha256, tuple((c.name, c.arguments_sha256) for c in result.tool_calls))


def _add_abs_diff(out: list[float], x: float | None, y: float | None) -> None:
    if x is not None and y is not None:
        out.append(abs(x - y))


# -- judging ---------------------------------------------------------------------------------------


def judge(observations: Sequence[Observation], reference: Sequence[Observation], floor: NoiseFloor) -> list[Judged]:
    """One `Judged` per observation, in the same order.

    `reference` holds the reference route's observations (others in it, of routes other than
    `floor.reference`, are ignored). In priority order: an observation that failed keeps its
    outcome; with no OK reference exchange it is OK ("no reference exchange to compare with");
    else content (`content_mismatch`), then arrival (`buffered`), then latency (`slow`) are
    compared with the reference exchange; otherwise OK. Latency is judged against the larger of
    the floor and the exchange's own spread across the reference repetitions.
    """
    index = _group_ok(o for o in reference if o.route == floor.reference)
    # What the comparisons need of a reference exchange is the same for every route and
    # repetition judged against it: computed once, keyed by identity (observations are values;
    # hashing one would hash all its events).
    facts: dict[int, _RefFacts] = {}
    judged = []
    for obs in observations:
        ref = _find_reference(index, obs)
        if obs.outcome.is_failure:
            judged.append(Judged(obs, obs.outcome, obs.detail, ref))
            continue
        if ref is None:
            judged.append(Judged(obs, Outcome.OK, "no reference exchange to compare with", None))
            continue
        known = facts.get(id(ref))
        if known is None:
            known = facts[id(ref)] = _ref_facts(ref, index[exchange_key(ref)].values())
        judged.append(_compare(obs, ref, floor, known))
    return _systematic(judged)


def _systematic(judged: list[Judged]) -> list[Judged]:
    """Degradations seen on too few of the route's exchanges are taken back (SYSTEMATIC_SHARE);
    the detail keeps what was seen."""
    for kind in (Outcome.BUFFERED, Outcome.SLOW):
        hits = [i for i, j in enumerate(judged) if j.outcome is kind]
        if not hits:
            continue
        eligible = sum(
            1 for j in judged
            if j.reference is not None and not j.outcome.is_failure
            and (kind is not Outcome.BUFFERED or j.obs.content_events >= BUFFER_MIN_EVENTS)
        )  # fmt: skip
        if len(hits) >= SYSTEMATIC_SHARE * eligible:
            continue
        note = f" (not counted: {len(hits)} of {eligible} exchanges on this route, not a habit of the route)"
        for i in hits:
            j = judged[i]
            judged[i] = Judged(j.obs, Outcome.OK, j.detail + note, j.reference)
    return judged


@dataclass(frozen=True, slots=True)
class _RefFacts:
    shape: tuple[int, int] | None  # (content events, bursts) of the reference observation
    ttft_spread: float  # max - min over the exchange's OK reference repetitions (0.0 with one)
    e2e_spread: float


def _ref_facts(ref: Observation, repetitions: Iterable[Observation]) -> _RefFacts:
    runs = list(repetitions)
    return _RefFacts(_bursts(ref), _spread(o.ttft for o in runs), _spread(o.e2e for o in runs))


def _spread(values: Iterable[float | None]) -> float:
    known = [v for v in values if v is not None]
    return max(known) - min(known) if len(known) >= 2 else 0.0


def _find_reference(index: dict[ExchangeKey, dict[int, Observation]], obs: Observation) -> Observation | None:
    reps = index.get(exchange_key(obs))
    if not reps:
        return None
    same = reps.get(obs.repetition)
    return same if same is not None else next(iter(reps.values()))  # the lowest OK repetition


def _compare(obs: Observation, ref: Observation, floor: NoiseFloor, facts: _RefFacts) -> Judged:
    name = floor.reference
    if obs.result is not None and ref.result is not None:
        problem = (_content_exact if floor.deterministic else _content_structural)(obs.result, ref.result, floor, name)
        if problem:
            return Judged(obs, Outcome.CONTENT_MISMATCH, problem, ref)
    problem = _buffering(obs, ref, floor, facts.shape)
    if problem:
        return Judged(obs, Outcome.BUFFERED, problem, ref)
    problem = _slowness(obs, ref, floor, facts)
    if problem:
        return Judged(obs, Outcome.SLOW, problem, ref)
    return Judged(obs, Outcome.OK, "", ref)


def _content_exact(got: ResultSummary, want: ResultSummary, floor: NoiseFloor, name: str) -> str:
    """The engine answered identically in every reference repetition: any difference counts."""
    problems = []
    if got.text_sha256 != want.text_sha256:
        size = f"{got.text_len} chars vs {want.text_len}" if got.text_len != want.text_len else "same length"
        problems.append(
            f"the answer differs from {name}'s ({size}; the engine gave the same answer in every {name} repetition)"
        )
    calls = [(c.name, c.arguments_sha256) for c in got.tool_calls]
    if calls != [(c.name, c.arguments_sha256) for c in want.tool_calls]:
        problems.append(f"tool calls differ: {_calls(got.tool_calls)} vs {_calls(want.tool_calls)} on {name}")
    return "; ".join(problems)


def _content_structural(got: ResultSummary, want: ResultSummary, floor: NoiseFloor, name: str) -> str:
    """The engine samples (or the floor could not tell): only differences an engine's own
    variation does not explain count."""
    problems = []
    if got.finish_reason != want.finish_reason:
        problems.append(f"finish reason {got.finish_reason or 'none'} (on {name}: {want.finish_reason or 'none'})")
    got_names = [c.name for c in got.tool_calls]
    want_names = [c.name for c in want.tool_calls]
    if got_names != want_names:
        problems.append(f"tool calls differ: {_names(got_names)} vs {_names(want_names)} on {name}")
    else:
        pairs = zip(got.tool_calls, want.tool_calls)
        broken = [g.name or "?" for g, w in pairs if w.arguments_valid and not g.arguments_valid]
        if broken:
            problems.append(f"tool call {', '.join(broken)} has arguments that are not valid JSON (valid on {name})")
    limit = TOKENS_FLOOR_FACTOR * floor.tokens + TOKENS_SLACK
    if got.completion_tokens is not None and want.completion_tokens is not None:
        if abs(got.completion_tokens - want.completion_tokens) > limit:
            problems.append(
                f"{got.completion_tokens} completion tokens vs {want.completion_tokens} on {name} "
                f"(the {name} repetitions differed by at most {floor.tokens})"
            )
    return "; ".join(problems)


def _calls(calls: Sequence[ToolCallSummary]) -> str:
    # Arguments are digests only (the text stays in the recording): a short prefix tells them apart.
    if not calls:
        return "none"
    return ", ".join(f"{c.name or '?'}(args {c.arguments_sha256[:8]})" for c in calls)


def _names(names: Sequence[str | None]) -> str:
    return ", ".join(n or "?" for n in names) if names else "none"


def _buffering(obs: Observation, ref: Observation, floor: NoiseFloor, ref_shape: tuple[int, int] | None) -> str:
    shape = _bursts(obs)
    if shape is None or ref_shape is None or shape[0] < BUFFER_MIN_EVENTS:
        return ""
    b, r = shape[0] / shape[1], ref_shape[0] / ref_shape[1]
    if b < BUFFER_MIN_BURST or b / r <= max(BUFFER_RATIO, 2 * floor.burst):
        return ""
    bursts = "1 burst" if shape[1] == 1 else f"{shape[1]} bursts"
    detail = f"content arrived in {bursts} of {b:.0f} events on average ({floor.reference}: {r:.1f})"
    if obs.ttft is not None and ref.ttft is not None:
        detail += f"; first content after {obs.ttft:.2f} s ({floor.reference}: {ref.ttft:.2f} s)"
    encoding, ref_encoding = obs.response_header("content-encoding"), ref.response_header("content-encoding")
    if encoding not in (None, "", "identity") and encoding != ref_encoding:
        # Compressing a stream holds events back until the compressor's buffer fills, unless the
        # hop flushes it per event: the user should look at compression as well as buffering.
        detail += (f"; the route answered with Content-Encoding: {encoding} "
                   f"({floor.reference}: {ref_encoding or 'none'})")  # fmt: skip
    return detail


def _slowness(obs: Observation, ref: Observation, floor: NoiseFloor, facts: _RefFacts) -> str:
    problems = []
    for what, got, want, spread in (
        ("first content", obs.ttft, ref.ttft, max(floor.ttft, facts.ttft_spread)),
        ("complete", obs.e2e, ref.e2e, max(floor.e2e, facts.e2e_spread)),
    ):
        if got is None or want is None:
            continue
        if got - want > max(SLOW_FLOOR_FACTOR * spread, SLOW_RELATIVE * want, SLOW_ABSOLUTE):
            problems.append(f"{what} after {got:.2f} s ({floor.reference}: {want:.2f} s; noise floor {spread:.2f} s)")
    return "; ".join(problems)
