"""The differ: each exchange observed on a route, judged against the same exchange on the
reference route (normally `direct`, straight to the engine), beyond a measured noise floor.

It owns three things (docs/design.md, "Outcomes" and "Localization"):

* `burstiness`: how a stream's content events arrived (1.0 = one by one, N = all N at once);
* `noise_floor`: how much the reference route differs from itself between repetitions (content,
  latency, burstiness, token counts): differences within it are noise, not a hop's doing;
* `judge`: one `Judged` per observation: its own failure unchanged, else `content_mismatch`,
  `buffered`, `slow` or `ok` from the comparison with the reference exchange.

An exchange is keyed by (session, turn, xid); the reference for an observation is the same key
on the reference route, in the same repetition when that one is OK (the closest conditions:
same think times, same server warmth), else in any repetition where it was OK.

Content is evidence against a route only beyond what the reference shows against itself:

* a deterministic engine (the floor saw the same text and tool calls in every reference
  repetition of every exchange): judged exchange by exchange; any other text or tool call is a
  `content_mismatch` of that exchange;
* a sampling engine (the reference repetitions differ): one exchange that differs proves
  nothing, so content is judged as a rate. An exchange differs in structure when the tool calls
  (whether there are any, their names, whether their arguments are valid JSON), the finish
  reason or the length class (one answer more than twice as long as the other) differ; the
  fraction of a route's exchanges that differ from the reference is compared with the fraction
  of the same exchanges that differ between reference repetitions, by a one-sided Fisher's
  exact test (p < CONTENT_ALPHA, shared among the routes judged against one floor: Bonferroni).
  A route that fails the test has each exchange that differs judged `content_mismatch`, its
  detail stating the test ("content differs from direct on 14/20 exchanges of via:edge, on 3/20
  between direct's own repetitions: one-sided Fisher's exact test p=0.00053 < 0.01"); a route
  that passes has none. Either way each counted exchange keeps what differs in
  `Judged.differs` (`content_rate`), so the localizer can weigh a route against the hop route
  inward of it by the same rates. Under sampling, which exchanges differ is partly chance, so
  the first of them is no proof of the turn a change began at: replaying with `--greedy` makes
  the engine deterministic and the judgement per exchange again;
* no reference repetitions (one replay of direct): whether the engine samples is unknown, so
  content is not compared at all (a verdict then suggests replaying direct twice).

A route's real failures (a stall, a 413, a reset) are never touched by this: they are their
own outcomes at their own turns, and only its OK exchanges enter the content rate.

Pure: values in, values out; no clocks, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Iterable, Sequence

from proxycheck.core.diagnose.verdict import Judged, NoiseFloor
from proxycheck.core.exchange.observation import Observation, ResultSummary, ToolCallSummary
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.stats import fisher_greater, percentile

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

# A degradation is a hop's habit, not an accident: on a route it counts only when more than this
# share of the exchanges where it could show (compared with a reference; for buffering, long
# enough to judge) do show it, and, where several repetitions of the route had such exchanges, in
# more than one of them. A hop that buffers or slows does so to most of what it carries, every
# time; a burst or a delay on 2 of 18 exchanges is the machine (a process descheduled, a
# collection pause), and so is one repetition's worth: on a real engine, a moment of the machine
# starved of CPU delays and bunches every stream of that moment (measured: vLLM's 24 tokens in one
# burst after 0.76 s on both turn-1 streams of one repetition, the rest of the route's exchanges
# refused by a body limit). Blaming a hop for it is a false alarm.
SYSTEMATIC_SHARE = 0.5

# Content under sampling: a route's rate of exchanges that differ in structure from the
# reference counts against it when a one-sided Fisher's exact test against the reference's own
# rate gives p below this. Answers are in another length class when one is more than
# LENGTH_CLASS_RATIO times the other and more than LENGTH_SLACK tokens apart (an end-of-text
# token counted or not, on either side). The rule is fixed, not taken from the floor: the same
# rule must judge direct against itself and a route against direct for the rates to compare.
CONTENT_ALPHA = 0.01
LENGTH_CLASS_RATIO = 2.0
LENGTH_SLACK = 2


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
    two or more repetitions. With no pairs the floor is zero and not deterministic, and content
    is not compared (one run cannot show whether the engine samples). `content_differs` of
    `content_compared`: the later repetitions of each exchange that differ in structure from its
    first (`structure_difference`), the reference's own rate.
    """
    groups = _group_ok(o for o in reference if o.route == route)
    ttft_diffs: list[float] = []
    e2e_diffs: list[float] = []
    burst = 1.0
    tokens = 0
    pairs = 0
    deterministic = True
    differs = compared = 0
    for reps in groups.values():
        runs = list(reps.values())
        if len(runs) < 2:
            continue
        pairs += 1
        first = _content_signature(runs[0].result)
        if any(_content_signature(o.result) != first for o in runs[1:]):
            deterministic = False
        k, n = _own_differences(runs)
        differs, compared = differs + k, compared + n
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
        content_differs=differs,
        content_compared=compared,
    )


def _own_differences(runs: Sequence[Observation]) -> tuple[int, int]:
    """(differing, compared): each later repetition of one exchange against its first, in structure."""
    first = runs[0].result
    if first is None:
        return 0, 0
    later = [o.result for o in runs[1:] if o.result is not None]
    return sum(1 for r in later if structure_difference(r, first, "")), len(later)


def _group_ok(observations: Iterable[Observation]) -> dict[ExchangeKey, dict[int, Observation]]:
    """Complete observations (OK, or `slow` after a silence the client's patience waited out) by
    exchange, then by repetition (the first of a repetition wins), with repetitions in ascending
    order."""
    groups: dict[ExchangeKey, dict[int, Observation]] = {}
    for o in observations:
        if not o.outcome.answered:
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


def judge(observations: Sequence[Observation], reference: Sequence[Observation], floor: NoiseFloor, *,
          routes: int = 1) -> list[Judged]:  # fmt: skip
    """One `Judged` per observation, in the same order.

    `reference` holds the reference route's observations (others in it, of routes other than
    `floor.reference`, are ignored). In priority order: an observation that failed keeps its
    outcome; with no OK reference exchange it is OK ("no reference exchange to compare with");
    else content (`content_mismatch`: per exchange when the floor is deterministic, by each
    route's rate when the engine samples; see the module docstring), then arrival (`buffered`),
    then latency (`slow`) are compared with the reference exchange; otherwise OK. Latency is
    judged against the larger of the floor and the exchange's own spread across the reference
    repetitions. `routes`: how many routes are judged against this floor in all (the ladder's
    hops): the content rate test's CONTENT_ALPHA is shared among them (Bonferroni), so a long
    chain is no likelier than a short one to have a hop blamed by chance.
    """
    index = _group_ok(o for o in reference if o.route == floor.reference)
    # What the comparisons need of a reference exchange is the same for every route and
    # repetition judged against it: computed once, keyed by identity (observations are values;
    # hashing one would hash all its events).
    facts: dict[int, _RefFacts] = {}
    by_rate = floor.sampling
    rates: dict[str, _Rate] = {}  # sampling: each route's exchanges compared in structure
    judged = []
    for obs in observations:
        ref = _find_reference(index, obs)
        if obs.outcome.is_failure:
            judged.append(Judged(obs, obs.outcome, obs.detail, ref))
            continue
        if ref is None:
            if obs.outcome is Outcome.SLOW and obs.route == floor.reference:
                judged.append(Judged(obs, Outcome.SLOW, obs.detail, None))
            else:
                judged.append(Judged(obs, Outcome.OK, "no reference exchange to compare with", None))
            continue
        known = facts.get(id(ref))
        if known is None:
            known = facts[id(ref)] = _ref_facts(ref, index[exchange_key(ref)].values())
        if by_rate and obs.result is not None and ref.result is not None:
            rate = rates.setdefault(obs.route, _Rate())
            rate.compared.append((len(judged), exchange_key(obs), structure_difference(obs.result, ref.result,
                                                                                    floor.reference)))  # fmt: skip
        compared = _compare(obs, ref, floor, known, content=floor.deterministic)
        if obs.outcome is Outcome.SLOW and compared.outcome is Outcome.OK and obs.route == floor.reference:
            # The reference route's own silence past a watchdog, which the client's patience waited
            # out: slow as it was seen. Another route is slow only beyond the reference (`_slowness`).
            compared = Judged(obs, Outcome.SLOW, obs.detail, ref)
        judged.append(compared)
    for route, rate in rates.items():
        _judge_rate(judged, route, rate, index, floor.reference, max(1, routes))
    return _systematic(judged)


@dataclass
class _Rate:
    """One route's OK exchanges compared in structure with the reference: (position in the
    judged list, exchange, what differs or "")."""

    compared: list[tuple[int, ExchangeKey, str]] = field(default_factory=list)


def _judge_rate(judged: list[Judged], route: str, rate: _Rate, index: dict[ExchangeKey, dict[int, Observation]],
                name: str, routes: int) -> None:  # fmt: skip
    """The content rate test of one route (sampling engines): the route's share of exchanges that
    differ from the reference against the reference's own share on the same exchanges. Failing
    it, every exchange that differs becomes `content_mismatch`, with the test in its detail."""
    # Only exchanges the reference repeated can be weighed against its own differences.
    own: dict[ExchangeKey, tuple[int, int]] = {}
    for key in {key for _, key, _ in rate.compared}:
        runs = list(index[key].values())
        if len(runs) >= 2:
            own[key] = _own_differences(runs)
    counted = [(i, problem) for i, key, problem in rate.compared if key in own and own[key][1]]
    for i, problem in counted:  # counted whatever the test concludes (the localizer weighs routes by them)
        j = judged[i]
        judged[i] = Judged(j.obs, j.outcome, j.detail, j.reference, problem)
    k0 = sum(k for k, _ in own.values())
    n0 = sum(n for _, n in own.values())
    k = sum(1 for _, problem in counted if problem)
    n = len(counted)
    if not k or not n0:
        return
    p = fisher_greater(k, n - k, k0, n0 - k0)
    alpha = CONTENT_ALPHA / routes
    if p >= alpha or k / n <= k0 / n0:
        return  # no more than direct differs from itself: sampling, not the route
    shared = f" ({CONTENT_ALPHA:g} shared by {routes} routes)" if routes > 1 else ""
    test = (f"content differs from {name} on {k}/{n} exchanges of {route}, on {k0}/{n0} between {name}'s own "
            f"repetitions: one-sided Fisher's exact test p={p:.2g} < {alpha:.2g}{shared}")  # fmt: skip
    for i, problem in counted:
        if problem:
            j = judged[i]
            judged[i] = Judged(j.obs, Outcome.CONTENT_MISMATCH, f"{problem}; {test}", j.reference, problem)


def content_rate(judged: Iterable[Judged]) -> tuple[int, int]:
    """(differing, compared): a route's exchanges counted in its content rate (`Judged.differs`)."""
    compared = [j.differs for j in judged if j.differs is not None]
    return sum(1 for d in compared if d), len(compared)


def _systematic(judged: list[Judged]) -> list[Judged]:
    """Degradations seen on too few of the route's exchanges, or in one of its several repetitions
    only, are taken back (SYSTEMATIC_SHARE); the detail keeps what was seen."""
    for kind in (Outcome.BUFFERED, Outcome.SLOW):
        hits = [i for i, j in enumerate(judged) if j.outcome is kind]
        if not hits:
            continue
        eligible = [
            j for j in judged
            if j.reference is not None and not j.outcome.is_failure
            and (kind is not Outcome.BUFFERED or j.obs.content_events >= BUFFER_MIN_EVENTS)
        ]  # fmt: skip
        several = len({j.obs.repetition for j in eligible}) > 1
        seen_in = {judged[i].obs.repetition for i in hits}
        if len(hits) > SYSTEMATIC_SHARE * len(eligible) and (len(seen_in) > 1 or not several):
            continue
        alone = f", all in repetition {min(seen_in)}" if several and len(seen_in) == 1 else ""
        note = (f" (not counted: {len(hits)} of {len(eligible)} exchanges on this route{alone}, "
                "not a habit of the route)")  # fmt: skip
        for i in hits:
            j = judged[i]
            judged[i] = Judged(j.obs, Outcome.OK, j.detail + note, j.reference, j.differs)
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


def _compare(obs: Observation, ref: Observation, floor: NoiseFloor, facts: _RefFacts, *, content: bool) -> Judged:
    """`content`: compare the answers exchange by exchange (a deterministic engine)."""
    name = floor.reference
    if content and obs.result is not None and ref.result is not None:
        problem = _content_exact(obs.result, ref.result, name)
        if problem:
            return Judged(obs, Outcome.CONTENT_MISMATCH, problem, ref)
    problem = _buffering(obs, ref, floor, facts.shape)
    if problem:
        return Judged(obs, Outcome.BUFFERED, problem, ref)
    problem = _slowness(obs, ref, floor, facts)
    if problem:
        return Judged(obs, Outcome.SLOW, problem, ref)
    return Judged(obs, Outcome.OK, "", ref)


def _content_exact(got: ResultSummary, want: ResultSummary, name: str) -> str:
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


def structure_difference(got: ResultSummary, want: ResultSummary, name: str) -> str:
    """What differs in structure between two answers to one request ("" when nothing does): the
    tool calls (any or none, their names, whether their arguments are valid JSON), the finish
    reason, the length class. Symmetric and fixed (no floor in it), so that direct against
    itself and a route against direct are counted by the same rule. `name` names `want`'s route."""
    problems = []
    if got.finish_reason != want.finish_reason:
        problems.append(f"finish reason {got.finish_reason or 'none'} (on {name}: {want.finish_reason or 'none'})")
    got_names = [c.name for c in got.tool_calls]
    want_names = [c.name for c in want.tool_calls]
    if got_names != want_names:
        problems.append(f"tool calls differ: {_names(got_names)} vs {_names(want_names)} on {name}")
    else:
        for g, w in zip(got.tool_calls, want.tool_calls):
            if g.arguments_valid != w.arguments_valid:
                state = "not valid JSON" if w.arguments_valid else "valid JSON"
                problems.append(f"tool call {g.name or '?'} has arguments that are {state} "
                                f"({'valid' if w.arguments_valid else 'not valid'} on {name})")  # fmt: skip
    x, y = got.completion_tokens, want.completion_tokens
    if x is not None and y is not None and abs(x - y) > LENGTH_SLACK and max(x, y) > LENGTH_CLASS_RATIO * min(x, y):
        problems.append(f"{x} completion tokens vs {y} on {name} (more than {LENGTH_CLASS_RATIO:g}x apart)")
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
