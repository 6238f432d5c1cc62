"""`proxycheck trace` benchmark: how often the same exchange is found at every point of a chain, and
what the trace costs, measured side by side in one run on this machine.

Three recordings of the same 1,000 exchanges are written through `proxycheck.io.storage.RecordingWriter`
at synthetic times, as three recorders of one chain would have written them: `edge` in front of
the hop `gateway`, `mid` in front of the hop `router`, `inner` in front of the engine. Each point's
clock is off from the true time by its own offset (+0 s, +2.3 s, -41 s) and each recorder started at
another moment; every hop adds its latency, with jitter, to the request on its way in and to each
response chunk on its way out (chunks keep their order). The traffic is what trips a matcher up:

* parallel agents: groups of 4-16 sessions launched together (a few to a few hundred milliseconds
  apart) whose first turns are identical (one system prompt, the group's task as the first user
  message; tasks repeat across groups), their histories diverging from the first answer on;
* a client re-sending the same body: after each failure (a backoff of 1-3 s), and regenerating an
  answer it already had (0.3-1.5 s after it);
* the gateway re-serializing the JSON of half the sessions (other key order, no spaces) before
  `mid`: the same exchange has other bytes from `mid` inward;
* the router answering a few first turns itself (agents joining their group late, their first
  turn from its cache): seen at `edge` and `mid`, never at `inner`;
* failures: answers lost by the router (complete at `inner`, stalled at `mid` and `edge` until
  the client gives up), fewer lost by the gateway (complete at `mid`), requests the router
  swallows (no response; absent at `inner`), and rate limits from the engine (HTTP 429 at every
  point, then the client's retry); never on a first turn.

Ground truth is known because every exchange is written by this script: each point's exchange
numbers map to the client's exchange. Measured: of the exchanges present at both points of each
pair, how many the trace matched to each other (its tracks), wrong matches (an exchange paired
with another one, or with one where it never arrived), whether the verdict (`proxy`, the router)
and each failure's place are right; the time of `proxycheck.io.points.load_points` and of
`proxycheck.core.points.trace.trace` separately (each's best of a few). Side by side, a naive
matcher on the same loaded points: the exact SHA-256 of the raw body, then the nearest request
time on the wall clocks as recorded (no offset estimate), each exchange used once, from each point
to the next one inward.

The same traffic is measured twice: agents of a group started 3-250 ms apart, and started in a
burst 0.5-3 ms apart (`--no-burst` skips it), where a hop's jitter reorders identical first turns
between two points: no rule that looks at requests alone can tell those apart.

Prints a table and, with --json FILE, writes the figures. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from proxycheck.core.points.matching import PointLog
from proxycheck.core.points.trace import INSIDE, LOST, Trace, trace
from proxycheck.core.replay.chain import Chain, parse_chain
from proxycheck.io.points import load_points
from proxycheck.io.storage import RecordingWriter

POINTS = ("edge", "mid", "inner")  # from the client inward
CLOCK_OFFSETS = {"edge": 0.0, "mid": 2.3, "inner": -41.0}  # each point's clock minus the true time
RECORDER_STARTS = {"edge": -5.0, "mid": -20.0, "inner": -60.0}  # true time each recorder started
HOSTS = {"edge": "http://gateway.bench:4000", "mid": "http://router.bench:4100", "inner": "http://engine.bench:30000"}
CHAT = "/v1/chat/completions"
CHAIN = """engine = "http://127.0.0.1:30000"
[engine_options]
point = "inner"
[[hop]]
name = "gateway"
url = "http://127.0.0.1:4000"
point = "edge"
[[hop]]
name = "router"
url = "http://127.0.0.1:4100"
point = "mid"
"""
SYSTEM = "You are a coding agent working in a repository. Use the tools; answer briefly. " + "Repository map: " + " ".join(
    f"src/module_{i}.py" for i in range(120))  # fmt: skip
TASKS = ("fix the failing test in tests/test_parser.py", "add type hints to src/module_7.py",
         "make the build reproducible", "write a changelog entry for the release")  # fmt: skip
WORDS = ("the", "test", "fails", "because", "parser", "reads", "one", "byte", "late", "so", "I", "will", "patch", "it",
         "now", "and", "run", "again", "looks", "good", "file", "changed", "line", "check")  # fmt: skip
FLUSH_EVERY = 0.5  # the recorder's flush timer
EXPECTED_CULPRIT = "router"

# What happens to an exchange between the points.
OK, LOST_ROUTER, LOST_GATEWAY, DROPPED, RATE_LIMITED, CACHED = "ok", "lost_router", "lost_gateway", "dropped", "rate_limited", "cached"
# Where the trace should place each kind of failure: (kind, outer, inner) as indexes into POINTS.
# A swallowed request is absent at `inner`, which also misses the router's own answers: its
# absence says nothing (the trace's credible-absence rule), so it is expected unknown.
EXPECTED_PLACE = {LOST_ROUTER: (LOST, 1, 2), LOST_GATEWAY: (LOST, 0, 1), RATE_LIMITED: (INSIDE, 2, None), DROPPED: ("unknown", 1, None)}


@dataclass(frozen=True)
class Spec:
    exchanges: int = 1000
    lost_router: int = 12
    lost_gateway: int = 4
    dropped: int = 3
    rate_limited: int = 6
    cached: int = 10
    regenerated: int = 25
    reserialized: float = 0.5  # share of sessions whose JSON the gateway re-serializes
    spawn_gap: tuple[float, float] = (0.003, 0.25)  # seconds between two agents of a group starting
    gateway_latency: tuple[float, float] = (0.008, 0.006)  # base, mean of the exponential jitter
    router_latency: tuple[float, float] = (0.003, 0.003)
    duration: float = 600.0  # groups start over this many seconds
    seed: int = 1

    @property
    def extra_attempts(self) -> int:
        """Exchanges beyond one per turn: a retry after each failure, each regeneration."""
        return self.lost_router + self.lost_gateway + self.dropped + self.rate_limited + self.regenerated


@dataclass
class View:
    """What one point saw of one exchange, on the true clock."""

    body: bytes
    t_request: float
    status: int | None = None
    t_headers: float | None = None
    streamed: bool = True
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    t_end: float | None = None
    error: str | None = None  # the end was this error


@dataclass
class Exchange:
    uid: int
    session: str
    kind: str
    views: dict[str, View]  # by point; a point that never saw it is missing


# -------------------------------------------------------------------- the traffic


def _sse(words: Sequence[str]) -> list[bytes]:
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": "qwen3-coder"}
    out = [b"data: " + json.dumps({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}).encode() + b"\n\n"]
    out += [b"data: " + json.dumps({**head, "choices": [{"index": 0, "delta": {"content": w + " "}}]}).encode() + b"\n\n"
            for w in words]  # fmt: skip
    out.append(b"data: " + json.dumps({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


def _reordered(doc: Any) -> Any:
    """The same JSON with every object's members in reverse order (what a hop that rebuilds it does)."""
    if isinstance(doc, dict):
        return {k: _reordered(doc[k]) for k in reversed(list(doc))}
    if isinstance(doc, list):
        return [_reordered(v) for v in doc]
    return doc


class Chain3:
    """Latencies of the two hops and the engine's answers, drawn from one seeded generator."""

    def __init__(self, spec: Spec, rng: random.Random) -> None:
        self.spec, self.rng = spec, rng

    def delay(self, hop: tuple[float, float]) -> float:
        base, jitter = hop
        return base + self.rng.expovariate(1 / jitter)

    def inward(self, t: float) -> tuple[float, float, float]:
        """When a request sent at `t` reaches edge, mid and inner."""
        t_mid = t + self.delay(self.spec.gateway_latency)
        return t, t_mid, t_mid + self.delay(self.spec.router_latency)

    def outward(self, times: Sequence[float], hop: tuple[float, float]) -> list[float]:
        """Chunk times one hop further out: each delayed, none overtaking the one before."""
        out, last = [], float("-inf")
        for t in times:
            last = max(t + self.delay(hop), last + 1e-6)
            out.append(last)
        return out

    def answer(self, t_inner: float) -> tuple[float, list[tuple[float, bytes]], float, list[str]]:
        """The engine's streamed answer to a request reaching it at `t_inner`: headers time, chunks, end."""
        words = [self.rng.choice(WORDS) for _ in range(self.rng.randint(10, 60))]
        headers = t_inner + self.rng.uniform(0.02, 0.2)
        t = headers + self.rng.uniform(0.1, 1.2)
        chunks = []
        for chunk in _sse(words):
            chunks.append((t, chunk))
            t += self.rng.uniform(0.012, 0.04)
        return headers, chunks, chunks[-1][0] + 0.002, words


def _exchange(chain: Chain3, uid: int, session: str, kind: str, body: bytes, inner_body: bytes, t: float) -> Exchange:
    """One exchange sent by the client at `t` (true time), as each point saw it."""
    rng, spec = chain.rng, chain.spec
    t_edge, t_mid, t_inner = chain.inward(t)
    views = {"edge": View(body, t_edge), "mid": View(inner_body, t_mid)}
    if kind == CACHED:  # the router answers from its cache, at once and fast
        headers, chunks = t_mid + 0.003, []
        at = headers + 0.001
        for chunk in _sse([rng.choice(WORDS) for _ in range(rng.randint(10, 60))]):
            chunks.append((at, chunk))
            at += 0.0005
        _fill(views["mid"], 200, headers, chunks, at + 0.001)
        _pass_out(chain, views["mid"], views["edge"], spec.gateway_latency)
        return Exchange(uid, session, kind, views)
    if kind == DROPPED:  # the router swallows it: no response until the client gives up
        gave_up = t_edge + rng.uniform(10, 30)
        views["edge"].t_end, views["edge"].error = gave_up, "Client disconnected."
        views["mid"].t_end, views["mid"].error = gave_up + chain.delay(spec.gateway_latency), "Client disconnected."
        return Exchange(uid, session, kind, views)
    views["inner"] = View(inner_body, t_inner)
    if kind == RATE_LIMITED:
        doc = {"error": {"message": "Rate limit reached, retry later", "type": "rate_limit_error", "code": 429}}
        at = t_inner + rng.uniform(0.002, 0.01)
        views["inner"].streamed = False
        _fill(views["inner"], 429, at, [(at + 0.0005, json.dumps(doc).encode())], at + 0.001)
    else:
        headers, chunks, end, _ = chain.answer(t_inner)
        _fill(views["inner"], 200, headers, chunks, end)
    _pass_out(chain, views["inner"], views["mid"], spec.router_latency)
    _pass_out(chain, views["mid"], views["edge"], spec.gateway_latency)
    if kind in (LOST_ROUTER, LOST_GATEWAY):  # the rest of the answer never comes out of the hop
        kept = rng.randint(2, 6)
        lossy = ("mid", "edge") if kind == LOST_ROUTER else ("edge",)
        for name in lossy:
            views[name].chunks = views[name].chunks[:kept]
        gave_up = views["edge"].chunks[-1][0] + rng.uniform(10, 30)
        views["edge"].t_end, views["edge"].error = gave_up, "Client disconnected."
        if kind == LOST_ROUTER:
            views["mid"].t_end, views["mid"].error = gave_up + chain.delay(spec.gateway_latency), "Client disconnected."
    return Exchange(uid, session, kind, views)


def _fill(view: View, status: int, headers: float, chunks: list[tuple[float, bytes]], end: float) -> None:
    view.status, view.t_headers, view.chunks, view.t_end = status, headers, chunks, end


def _pass_out(chain: Chain3, inner: View, outer: View, hop: tuple[float, float]) -> None:
    """What the point further out sees of the answer `inner` saw: the same bytes, one hop later."""
    times = chain.outward([inner.t_headers] + [t for t, _ in inner.chunks] + [inner.t_end], hop)  # type: ignore[list-item]
    outer.status, outer.streamed, outer.t_headers = inner.status, inner.streamed, times[0]
    outer.chunks = [(t, c) for t, (_, c) in zip(times[1:-1], inner.chunks)]
    outer.t_end = times[-1]


def traffic(spec: Spec) -> list[Exchange]:
    """Every exchange the client sends (see the module docstring), in no particular order."""
    rng = random.Random(spec.seed)
    chain = Chain3(spec, rng)
    turns_wanted = spec.exchanges - spec.extra_attempts
    # Sessions: groups of parallel agents; a group's late joiners are the router's cache hits.
    sessions: list[tuple[str, float, int, int, bool]] = []  # name, start, turns, task, joined late
    groups, turns, g = [], 0, 0
    while turns < turns_wanted:
        size = rng.randint(4, 16)
        start = rng.uniform(0, spec.duration)
        task = g % len(TASKS)
        t = start
        for i in range(size):
            n = rng.randint(3, 14)
            sessions.append((f"g{g}-a{i}", t, n, task, False))
            turns += n
            t += rng.uniform(*spec.spawn_gap)
        groups.append((g, start, task))
        g += 1
    for k in range(spec.cached):
        gi, start, task = groups[k % len(groups)]
        n = rng.randint(3, 8)
        sessions.append((f"g{gi}-late{k}", start + rng.uniform(10, 40), n, task, True))
        turns += n
    # Trim the last sessions' turns to the number wanted (every session keeps at least one).
    excess = turns - turns_wanted
    for i in range(len(sessions) - 1, -1, -1):
        if excess <= 0:
            break
        name, start, n, task, late = sessions[i]
        cut = min(excess, n - 1)
        sessions[i] = (name, start, n - cut, task, late)
        excess -= cut
    # Which turns fail, and how; which are regenerated. Never a first turn: of identical first turns
    # a hop reordered, a request-only rule cannot say which one failed (docs/benchmarks.md).
    slots = [(si, k) for si, s in enumerate(sessions) for k in range(1, s[2])]
    rng.shuffle(slots)
    fates: dict[tuple[int, int], str] = {}
    for kind, count in ((LOST_ROUTER, spec.lost_router), (LOST_GATEWAY, spec.lost_gateway), (DROPPED, spec.dropped),
                        (RATE_LIMITED, spec.rate_limited), ("regenerated", spec.regenerated)):  # fmt: skip
        for _ in range(count):
            fates[slots.pop()] = kind
    out: list[Exchange] = []
    for si, (name, start, n, task, late) in enumerate(sessions):
        reserialize = rng.random() < spec.reserialized
        messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASKS[task]}]
        t = start
        for k in range(n):
            doc = {"model": "qwen3-coder", "messages": messages, "stream": True, "max_tokens": 256, "temperature": 0.7}
            body = json.dumps(doc).encode()
            inner_body = json.dumps(_reordered(doc), separators=(",", ":")).encode() if reserialize else body
            fate = fates.get((si, k), OK)
            kinds = [CACHED] if late and k == 0 else [fate, OK] if fate in EXPECTED_PLACE else [OK, OK] if fate == "regenerated" else [OK]
            answer = None
            for kind in kinds:
                x = _exchange(chain, len(out) + 1, name, kind, body, inner_body, t)
                out.append(x)
                edge = x.views["edge"]
                assert edge.t_end is not None
                answer = edge.chunks
                t = edge.t_end + (rng.uniform(1, 3) if kind in EXPECTED_PLACE else rng.uniform(0.3, 1.5))
            text = "".join(json.loads(c[6:])["choices"][0]["delta"].get("content", "") for _, c in answer or ()
                           if c.startswith(b"data: {"))  # fmt: skip
            messages = messages + [{"role": "assistant", "content": text.strip()},
                                   {"role": "user", "content": f"tool output for {name} step {k + 1}: " + " ".join(
                                       rng.choice(WORDS) for _ in range(rng.randint(20, 120)))}]  # fmt: skip
            t += rng.uniform(0.5, 8.0)
    return out


# -------------------------------------------------------------------- the recordings


def write_recordings(root: Path, exchanges: Sequence[Exchange]) -> tuple[list[str], dict[str, dict[int, int]]]:
    """The three points' recordings under `root`, and each point's exchange numbers -> the client's exchange."""
    dirs, truth = [], {}
    for name in POINTS:
        directory = root / name
        truth[name] = _write_point(directory, name, exchanges)
        dirs.append(str(directory))
    return dirs, truth


def _write_point(directory: Path, name: str, exchanges: Sequence[Exchange]) -> dict[int, int]:
    offset, started = CLOCK_OFFSETS[name], RECORDER_STARTS[name]
    now = [0.0]
    # The point's clock reads true time + offset; its recording's times are from its own start.
    writer = RecordingWriter(directory, source={"recorder": "mitmproxy", "synthetic": "benchmarks/bench_trace.py"},
                             clock=lambda: now[0], wall=lambda: started + offset + 1_800_000_000.0, point=name,
                             host=f"{name}.bench")  # fmt: skip
    local: Callable[[float], float] = lambda t: t - started  # noqa: E731
    url = HOSTS[name] + CHAT
    actions: list[tuple[float, int, Callable[[], None]]] = []
    xids: dict[int, int] = {}
    for x in exchanges:
        v = x.views.get(name)
        if v is None:
            continue

        def request(x: Exchange = x, v: View = v) -> None:
            headers = [("host", url.split("/")[2]), ("content-type", "application/json"), ("accept", "text/event-stream"),
                       ("content-length", str(len(v.body)))]  # fmt: skip
            xids[x.uid] = writer.request("POST", url, headers, v.body, http_version="HTTP/1.1", t=local(v.t_request),
                                         conn={"client_id": x.session})  # fmt: skip

        actions.append((v.t_request, len(actions), request))
        if v.status is not None:
            ctype = "text/event-stream" if v.streamed else "application/json"
            actions.append((v.t_headers, len(actions), lambda x=x, v=v, ct=ctype: writer.response(  # type: ignore[misc]
                xids[x.uid], v.status, "OK" if v.status == 200 else "Too Many Requests", [("content-type", ct)],
                streamed=v.streamed, t=local(v.t_headers))))  # fmt: skip
        for at, chunk in v.chunks:
            actions.append((at, len(actions), lambda x=x, at=at, chunk=chunk: writer.data(xids[x.uid], chunk, t=local(at))))
        assert v.t_end is not None
        if v.error is not None:
            actions.append((v.t_end, len(actions), lambda x=x, v=v: writer.error(xids[x.uid], v.error, t=local(v.t_end))))  # type: ignore[arg-type]
        else:
            actions.append((v.t_end, len(actions), lambda x=x, v=v: writer.end(xids[x.uid], t=local(v.t_end))))  # type: ignore[arg-type]
    actions.sort(key=lambda a: (a[0], a[1]))
    next_flush = actions[0][0] + FLUSH_EVERY
    for t, _, act in actions:
        while t >= next_flush:
            now[0] = local(next_flush)
            writer.flush()
            next_flush += FLUSH_EVERY
        now[0] = local(t)
        act()
    now[0] = local(actions[-1][0] + 5.0)
    writer.close("mitmproxy stopped")
    return {xid: uid for uid, xid in xids.items()}


# -------------------------------------------------------------------- matching, scored


Links = dict[tuple[int, int], list[tuple[int, int]]]  # (point a, point b) -> [(uid at a, uid at b)]


def links_of_trace(result: Trace, truth: Sequence[dict[int, int]]) -> Links:
    """Every pairing the trace made between two points, as the client's exchange numbers (a hop's
    resend is a pairing too: there are none in this traffic)."""
    links: Links = defaultdict(list)
    for track in result.tracks:
        for a in range(len(POINTS)):
            for b in range(a + 1, len(POINTS)):
                sa = track.seen[a]
                if sa is None:
                    continue
                ua = truth[a][sa.xid]
                if track.seen[b] is not None:
                    links[(a, b)].append((ua, truth[b][track.seen[b].xid]))  # type: ignore[union-attr]
                links[(a, b)] += [(ua, truth[b][r.xid]) for r in track.resent[b]]
    return links


def naive_links(points: Sequence[PointLog], truth: Sequence[dict[int, int]]) -> Links:
    """The baseline: each exchange of a point paired, at the next point inward, with the one of the
    same raw body's SHA-256 whose request is nearest on the wall clocks as recorded, each used once
    (in request order); points further apart through the ones between them."""
    steps: list[dict[int, int]] = []  # point j's index -> point j+1's index
    for outer, inner in zip(points, points[1:]):
        by_raw: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(inner.seen):
            by_raw[s.key.raw].append(i)
        used: set[int] = set()
        pairs: dict[int, int] = {}
        for oi in sorted(range(len(outer.seen)), key=lambda i: outer.seen[i].t_request):
            s = outer.seen[oi]
            t = outer.started_at + s.t_request
            candidates = [i for i in by_raw.get(s.key.raw, ()) if i not in used]
            if candidates:
                best = min(candidates, key=lambda i: abs(inner.started_at + inner.seen[i].t_request - t))
                used.add(best)
                pairs[oi] = best
        steps.append(pairs)
    links: Links = defaultdict(list)
    for a in range(len(points)):
        for i, s in enumerate(points[a].seen):
            j: int | None = i
            for b in range(a + 1, len(points)):
                j = steps[b - 1].get(j) if j is not None else None
                if j is not None:
                    links[(a, b)].append((truth[a][s.xid], truth[b][points[b].seen[j].xid]))
    return links


def score(links: Links, exchanges: Sequence[Exchange]) -> dict[str, Any]:
    """Matched right / present at both, per pair of points and over the neighbouring pairs; wrong
    matches, of an exchange present at both with another one (`swapped`; `identical`: of those,
    with one whose request the client sent byte for byte the same) or with one where it never
    arrived (`phantom`)."""
    present = {name: {x.uid for x in exchanges if name in x.views} for name in POINTS}
    sent = {x.uid: x.views["edge"].body for x in exchanges}
    out: dict[str, Any] = {}
    right_n = both_n = wrong_n = 0
    for a in range(len(POINTS)):
        for b in range(a + 1, len(POINTS)):
            both = present[POINTS[a]] & present[POINTS[b]]
            got = links.get((a, b), [])
            right = sum(1 for ua, ub in got if ua == ub)
            swapped = sum(1 for ua, ub in got if ua != ub and ua in both)
            identical = sum(1 for ua, ub in got if ua != ub and ua in both and sent[ua] == sent[ub])
            phantom = sum(1 for ua, ub in got if ua != ub and ua not in both)
            out[f"{POINTS[a]}-{POINTS[b]}"] = {"present_at_both": len(both), "right": right, "wrong": swapped + phantom,
                                               "swapped": swapped, "identical": identical, "phantom": phantom,
                                               "accuracy": round(right / len(both), 4) if both else None}  # fmt: skip
            if b == a + 1:
                right_n, both_n, wrong_n = right_n + right, both_n + len(both), wrong_n + swapped + phantom
    out["neighbours"] = {"present_at_both": both_n, "right": right_n, "wrong": wrong_n, "accuracy": round(right_n / both_n, 4)}
    return out


def placements(result: Trace, exchanges: Sequence[Exchange], truth: Sequence[dict[int, int]]) -> dict[str, Any]:
    """Each failure the client saw, placed by the trace, against where it was lost."""
    kind_of = {x.uid: x.kind for x in exchanges}
    placed: dict[str, dict[str, int]] = {k: {"failures": 0, "right": 0} for k in EXPECTED_PLACE}
    wrong: list[str] = []
    for track in result.tracks:
        s = track.seen[0]
        if s is None:
            continue
        kind = kind_of[truth[0][s.xid]]
        if kind not in EXPECTED_PLACE:
            if track.locus.kind != "fine":
                wrong.append(f"{kind} exchange {truth[0][s.xid]} placed {track.locus.kind}")
            continue
        placed[kind]["failures"] += 1
        got = (track.locus.kind, track.locus.outer, track.locus.inner)
        if got == EXPECTED_PLACE[kind]:
            placed[kind]["right"] += 1
        else:
            wrong.append(f"{kind} exchange {truth[0][s.xid]}: {got} ({track.locus.why})")
    return {"by_kind": placed, "misplaced": wrong}


def best_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, value = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - t0)
    return best, value


def run(spec: Spec, repeat: int) -> dict[str, Any]:
    exchanges = traffic(spec)
    chain: Chain = parse_chain(CHAIN, {}, "chain.toml")
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as tmp:
        t0 = time.perf_counter()
        dirs, truth_by_name = write_recordings(Path(tmp), exchanges)
        write_s = time.perf_counter() - t0
        load_s, (points, warnings) = best_time(lambda: load_points(dirs, chain), repeat)
    by_name = {p.name: p for p in points}
    ordered = [by_name[n] for n in POINTS]
    truth = [truth_by_name[n] for n in POINTS]
    trace_s, result = best_time(lambda: trace(points, len(chain.hops), chain.hops_between), repeat)
    naive_s, naive = best_time(lambda: naive_links(ordered, truth), repeat)
    ours = score(links_of_trace(result, truth), exchanges)
    base = score(naive, exchanges)
    kinds = defaultdict(int)
    for x in exchanges:
        kinds[x.kind] += 1
    return {
        "exchanges": len(exchanges), "kinds": dict(kinds), "sessions": len({x.session for x in exchanges}),
        "seen": {p.name: len(p.seen) for p in ordered}, "written": {n: len(truth_by_name[n]) for n in POINTS},
        "warnings": len(warnings), "write_s": round(write_s, 3),
        "load_s": round(load_s, 4), "trace_s": round(trace_s, 4), "naive_s": round(naive_s, 4),
        "trace_over_load": round(trace_s / load_s, 3),
        "ours": ours, "naive": base,
        "accuracy_ratio": round(ours["neighbours"]["accuracy"] / base["neighbours"]["accuracy"], 3)
        if base["neighbours"]["accuracy"] else None,
        "order": result.order, "pairs": [p.to_json() for p in result.pairs],
        "reserialized_sessions": len({x.session for x in exchanges if x.views["edge"].body != x.views["mid"].body}),
        "verdict": result.verdict, "culprit": result.culprit, "summary": result.summary,
        "verdict_right": result.verdict == "proxy" and result.culprit == EXPECTED_CULPRIT,
        "offsets": {p.name: o.to_json() for p, o in zip(result.points, result.offsets)},
        "true_offsets": {n: CLOCK_OFFSETS[n] - CLOCK_OFFSETS[POINTS[0]] for n in POINTS},
        "placed": placements(result, exchanges, truth),
    }  # fmt: skip


def report(f: dict[str, Any], spec: Spec) -> None:
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(f["kinds"].items()))
    print(f"trace of {f['exchanges']} exchanges ({kinds}) in {f['sessions']} sessions over 3 points "
          f"(clocks +0 / +2.3 / -41 s; agents of a group {spec.spawn_gap[0] * 1000:g}-{spec.spawn_gap[1] * 1000:g} ms "
          f"apart); recorded {f['written']}, loaded {f['seen']}, {f['warnings']} warning(s); written in {f['write_s']:.1f} s")  # fmt: skip
    print(f"  {'pair':<12} {'at both':>8}  {'trace: right':>13} {'wrong':>6} {'accuracy':>9}  "
          f"{'naive: right':>13} {'wrong':>6} {'accuracy':>9}")  # fmt: skip
    for pair in ("edge-mid", "mid-inner", "edge-inner", "neighbours"):
        o, b = f["ours"][pair], f["naive"][pair]
        print(f"  {pair:<12} {o['present_at_both']:>8}  {o['right']:>13} {o['wrong']:>6} {o['accuracy']:>9.4f}  "
              f"{b['right']:>13} {b['wrong']:>6} {b['accuracy']:>9.4f}")  # fmt: skip
    o = f["ours"]
    print("  wrong matches (trace), swapped (of them with a byte-identical request) / phantom: " + ", ".join(
        f"{p} {o[p]['swapped']} ({o[p]['identical']}) / {o[p]['phantom']}" for p in ("edge-mid", "mid-inner", "edge-inner")))
    print("  the trace's pairs: " + "; ".join(f"{p['outer']}-{p['inner']} both {p['both']}, re-serialized {p['reserialized']}, "
                                            f"resent {p['resent']}, outer only {p['outer_only']}" for p in f["pairs"]))  # fmt: skip
    print(f"  accuracy ratio trace / naive (neighbouring pairs): {f['accuracy_ratio']}")
    est = ", ".join(f"{n} {v['seconds']:+.3f} s (spread {v['spread'] * 1000:.1f} ms, {v['source']})" for n, v in f["offsets"].items())
    print(f"  offsets estimated: {est}; true: " + ", ".join(f"{n} {v:+.1f} s" for n, v in f["true_offsets"].items()))
    print(f"  verdict: {f['verdict']}, culprit {f['culprit']} ({'right' if f['verdict_right'] else 'WRONG'}): {f['summary']}")
    placed = f["placed"]["by_kind"]
    print("  failures placed as expected: " + ", ".join(f"{k} {v['right']}/{v['failures']}" for k, v in placed.items()))
    for line in f["placed"]["misplaced"][:10]:
        print(f"    misplaced: {line}")
    print(f"  time: load_points {f['load_s']:.3f} s, trace {f['trace_s']:.3f} s (ratio trace / load {f['trace_over_load']:.2f}), "
          f"naive matcher {f['naive_s']:.3f} s (best of each)")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exchanges", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of the load and of the trace (each's best)")
    ap.add_argument("--no-burst", action="store_true", help="skip the second traffic (agents of a group 0.5-3 ms apart)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    spec = Spec(exchanges=args.exchanges, seed=args.seed)
    figures = {"spread": run(spec, args.repeat)}
    report(figures["spread"], spec)
    if not args.no_burst:
        burst = Spec(exchanges=args.exchanges, seed=args.seed, spawn_gap=(0.0005, 0.003))
        figures["burst"] = run(burst, 1)  # its accuracy is the point; its times are one run each
        report(figures["burst"], burst)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
