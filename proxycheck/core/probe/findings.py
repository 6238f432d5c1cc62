"""Probe results, pure: what each probe found on each route, whose limit it is, the JSON document.

This module owns the results of `proxycheck probe` (`proxycheck.core.probe.searches` owns the searches):

* `ProbeResult`: one probe on one route. `state` is one of
  - `none`: nothing found up to the bound the probe went to (`bound`);
  - `limit`: a limit: `value` is the largest value that passed (a body size, an idle gap, a gap
    between tokens, a number of concurrent streams), `failed_at` the smallest that failed, and
    `evidence` what happened there (outcome, status, detail);
  - `degraded`: a property that hurts streams without breaking them (`kind`: SSE `buffered` or
    `batched`; a compressed SSE stream whose events bunch up);
  - `info`: worth knowing, not a fault (a compressed SSE stream whose events still flow);
  - `failed`: the probe's requests failed outright (a route whose baseline request fails is
    `failed` for every probe, with one finding for it all): that is a finding too;
  - `skipped`: not run (`--skip`, the token budget, or not possible on this engine);
  - `incomplete`: stopped by the token budget before a failure was seen (`value` passed).
* Ownership (`attribute`): a finding belongs to the innermost route where it first appears going
  outward along the ladder. On `direct` it is the engine's. On `via:HOP` it is inherited when the
  next probed route inward shows the same (for limits: this route did not fail at a value that
  route passed; for kinds: the same kind), else it is HOP's (or, when `--route` left routes out,
  one of the hops between the two routes).
* `ProbeReport` and `document`: everything, and its JSON form (`"schema": "proxycheck.probe/1"`).
* Words shared by the terminal report and the JSON summaries (`value_text`, `cell_text`,
  `finding_text`).

Exit status (the command's): 1 when a hop owns a finding (limit, degraded, failed), else 0; the
engine's own limits are reported, as the engine's, and do not fail a chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from proxycheck.core.probe.searches import PROBES

SCHEMA = "proxycheck.probe/1"
ENGINE = "engine"

NONE, LIMIT, DEGRADED, INFO, FAILED, SKIPPED, INCOMPLETE = (
    "none", "limit", "degraded", "info", "failed", "skipped", "incomplete",
)  # fmt: skip
FINDING_STATES = (LIMIT, DEGRADED, FAILED)

TITLES = {
    "body": "body size",
    "header": "header size",
    "idle": "idle reuse",
    "gap": "token gap",
    "sse": "SSE delivery",
    "compression": "compression",
    "concurrency": "concurrency",
}
UNITS = {"body": "bytes", "header": "bytes", "idle": "s", "gap": "s", "concurrency": "streams"}
# What a limit means, in the words of a proxy's configuration (the setting likely behind it).
MEANING = {
    "body": "request body size limit",
    "header": "request header size limit",
    "idle": "idle keep-alive reuse fails",
    "gap": "read timeout between tokens",
    "concurrency": "concurrent stream limit",
    "sse": "SSE responses not streamed",
    "compression": "SSE responses compressed",
}


@dataclass(frozen=True, slots=True)
class Evidence:
    """What happened at one probed value: the exchange's outcome (or `queued`), its status, and
    the observer's detail."""

    at: float | None
    outcome: str
    status: int | None = None
    detail: str = ""

    def short(self) -> str:
        if self.outcome == "http_error" and self.status is not None:
            return f"HTTP {self.status}"
        return self.outcome

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "outcome": self.outcome, "status": self.status, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class ProbeResult:
    route: str
    probe: str
    state: str
    value: float | None = None  # limit: the largest value that passed; none: the bound reached
    failed_at: float | None = None  # limit: the smallest value that failed
    bound: float | None = None
    kind: str | None = None  # sse: streamed/batched/buffered; compression: the Content-Encoding
    evidence: Evidence | None = None
    detail: str = ""  # a sentence: what was seen
    note: str = ""  # more to know (connections closed when idle, a contradicting result ...)
    trials: int = 0
    tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "probe": self.probe,
            "state": self.state,
            "value": self.value,
            "failed_at": self.failed_at,
            "bound": self.bound,
            "unit": UNITS.get(self.probe),
            "kind": self.kind,
            "evidence": self.evidence.to_json() if self.evidence else None,
            "detail": self.detail,
            "note": self.note,
            "trials": self.trials,
            "tokens": self.tokens,
        }


@dataclass(frozen=True, slots=True)
class Owned:
    """A result with its owner: a hop name, ENGINE, several candidates joined by " or " when
    routes in between were not probed, or None (nothing found)."""

    result: ProbeResult
    owner: str | None = None
    inherited: bool = False  # the same as the next probed route inward

    @property
    def hop_owned(self) -> bool:
        return self.owner is not None and self.owner != ENGINE and not self.inherited

    @property
    def finding(self) -> bool:
        return self.result.state in FINDING_STATES and self.owner is not None and not self.inherited


@dataclass(frozen=True, slots=True)
class RouteInfo:
    name: str
    hops: tuple[str, ...] = ()  # from the route's entry inward


@dataclass(frozen=True, slots=True)
class ProbeReport:
    chain: str
    engine: str
    reference: bool  # the engine is proxycheck's reference engine (timing extension used)
    dialect: str
    model: str
    routes: tuple[RouteInfo, ...]  # probed, in ladder order (direct first)
    probes: tuple[str, ...]  # run (the rest were skipped)
    bounds: dict[str, float]
    results: tuple[ProbeResult, ...]
    max_tokens_total: int | None = None
    tokens_spent: int = 0
    budget_exhausted: bool = False
    started: float = 0.0  # wall-clock time (epoch seconds)
    duration: float = 0.0
    warnings: tuple[str, ...] = field(default=())

    def result(self, route: str, probe: str) -> ProbeResult | None:
        return next((r for r in self.results if r.route == route and r.probe == probe), None)


# ------------------------------------------------------------------------------------------------
# Ownership


def attribute(report: ProbeReport) -> list[Owned]:
    """Every result with its owner, in ladder order per probe (see the module docstring)."""
    owned: list[Owned] = []
    for probe in PROBES:
        inner: tuple[RouteInfo, ProbeResult, Owned] | None = None
        for route in report.routes:
            result = report.result(route.name, probe)
            if result is None:
                continue
            here = _owner(route, result, inner)
            owned.append(here)
            if result.state not in (SKIPPED,):
                inner = (route, result, here)
    return owned


def _owner(route: RouteInfo, result: ProbeResult, inner: tuple[RouteInfo, ProbeResult, Owned] | None) -> Owned:
    if result.state not in FINDING_STATES and result.state != INFO:
        return Owned(result)
    if inner is not None and _same(result, inner[1]):
        return Owned(result, inner[2].owner, inherited=True)
    if not route.hops:
        return Owned(result, ENGINE)
    inner_hops = inner[0].hops if inner is not None else ()
    new = [h for h in route.hops if h not in inner_hops] or list(route.hops[:1])
    if inner is None:
        new.append(ENGINE)  # direct was not probed: the engine may be the one
    elif inner[1].state == INCOMPLETE and not _below(result, inner[1]):
        # The route inside stopped (token budget) short of where this one failed: the limit may
        # be there already.
        new += [h for h in inner_hops if h not in new] + [ENGINE]
    return Owned(result, " or ".join(new))


def _below(outer: ProbeResult, inner: ProbeResult) -> bool:
    """The outer route failed at a value the inner one passed."""
    return outer.failed_at is not None and inner.value is not None and outer.failed_at <= inner.value


def _same(outer: ProbeResult, inner: ProbeResult) -> bool:
    """The outer route shows nothing the inner one does not (so the inner one's owner owns it)."""
    if outer.state == FAILED or inner.state == FAILED:
        return outer.state == inner.state == FAILED
    if outer.probe in ("sse", "compression"):
        return inner.state in (LIMIT, DEGRADED, INFO) and outer.kind == inner.kind
    if inner.state != LIMIT or outer.state != LIMIT:
        return False
    return not _below(outer, inner)  # stricter only if it failed where the inner route passed


def exit_failed(report: ProbeReport) -> bool:
    """A hop owns a finding (the command exits 1)."""
    return any(o.finding and o.hop_owned for o in attribute(report))


# ------------------------------------------------------------------------------------------------
# Words


def size_text(n: float) -> str:
    n = float(n)
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}" if n / scale < 100 else f"{n / scale:.0f} {unit}"
    return f"{n:.0f} B"


def value_text(probe: str, v: float | None) -> str:
    if v is None:
        return "-"
    if probe in ("body", "header"):
        return size_text(v)
    if probe in ("idle", "gap"):
        return f"{v:.2f} s" if v < 10 else f"{v:.1f} s"
    if probe == "concurrency":
        return f"{v:.0f} stream{'s' if v != 1 else ''}"
    return f"{v:g}"


def cell_text(result: ProbeResult) -> str:
    """The table cell: the limit, "none ≤ bound", the kind, or why there is nothing."""
    p, st = result.probe, result.state
    if st == NONE:
        if result.kind:
            return result.kind
        return f"none ≤ {value_text(p, result.bound)}" if result.bound is not None else "none"
    if st == LIMIT:
        ev = result.evidence.short() if result.evidence else "failed"
        ok = f" (ok at {value_text(p, result.value)})" if result.value else ""
        if p == "idle":
            return f"{ev} after {value_text(p, result.failed_at)} idle{ok}"
        if p == "gap":
            return f"{ev} at a {value_text(p, result.failed_at)} gap{ok}"
        if p == "concurrency":
            return f"{value_text(p, result.value)} ok; {ev} at {result.failed_at:.0f}"
        return f"{value_text(p, result.value)} ok; {ev} at {value_text(p, result.failed_at)}"
    if st in (DEGRADED, INFO):
        return result.kind or st
    if st == FAILED:
        return f"failed: {result.evidence.short() if result.evidence else result.detail}"
    if st == INCOMPLETE:
        return f"none ≤ {value_text(p, result.value)} (budget)"
    return f"skipped{f' ({result.detail})' if result.detail else ''}"


def finding_text(o: Owned) -> str:
    """One sentence for a finding: whose, what, the evidence."""
    r = o.result
    who = "the engine" if o.owner == ENGINE else f"hop {o.owner}"
    if r.state == FAILED:
        return f"{r.route}: {who}: {r.detail}"
    what = MEANING.get(r.probe, r.probe)
    if r.state == LIMIT:
        detail = f" ({_clip(r.evidence.detail)})" if r.evidence and r.evidence.detail else ""
        return f"{r.route}: {who}: {what}: {cell_text(r)}{detail}"
    return f"{r.route}: {who}: {what}: {r.detail or r.kind}"


def _clip(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ------------------------------------------------------------------------------------------------
# The JSON document


def document(report: ProbeReport) -> dict[str, Any]:
    owned = attribute(report)
    return {
        "schema": SCHEMA,
        "chain": report.chain,
        "engine": {"url": report.engine, "reference": report.reference, "dialect": report.dialect,
                   "model": report.model},  # fmt: skip
        "routes": [{"route": r.name, "hops": list(r.hops)} for r in report.routes],
        "probes": list(report.probes),
        "bounds": dict(report.bounds),
        "budget": {"max_tokens_total": report.max_tokens_total, "spent": report.tokens_spent,
                   "exhausted": report.budget_exhausted},  # fmt: skip
        "complete": not report.budget_exhausted,
        "healthy": not exit_failed(report),
        "results": [{**o.result.to_json(), "belongs_to": o.owner, "inherited": o.inherited} for o in owned],
        "findings": [
            {"route": o.result.route, "probe": o.result.probe, "belongs_to": o.owner, "state": o.result.state,
             "summary": finding_text(o)}
            for o in findings(owned)
        ],  # fmt: skip
        "warnings": list(report.warnings),
        "started": report.started,
        "duration": round(report.duration, 3),
    }


def findings(owned: Sequence[Owned]) -> list[Owned]:
    """The findings, once each: a route that failed outright the same way in every probe (its
    baseline request) is one finding, not one per probe."""
    out: list[Owned] = []
    seen: set[tuple[str, str]] = set()
    for o in owned:
        if not o.finding:
            continue
        if o.result.state == FAILED:
            key = (o.result.route, o.result.detail)
            if key in seen:
                continue
            seen.add(key)
        out.append(o)
    return out
