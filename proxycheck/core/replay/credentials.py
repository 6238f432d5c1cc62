"""A credential the replay lacks: told apart from a fault, on the first exchange that shows it.

Recordings never hold credentials: the recorder redacts them (Authorization, x-api-key, ...), and
a replay sends what the chain file supplies instead. A hop that checks a key (nginx comparing
`x-api-key`, a LiteLLM master key) then answers 401 where the recorded client got a 200; blamed
as the culprit, that would repeat the wrong attribution this tool exists to end. So an answer of
401 or 403 (407 from a forward proxy) to a request that succeeded in the recording is a missing
credential: the replay stops there, and the message names the hop, what the recording redacted,
and the chain-file line that supplies it.

Not every gateway refuses with 401: LiteLLM without a database answers a missing master key with
a bare 500. So on a route through hops, any error answer is taken for a refusal too while it is
uncertain what else it could be: on the route's first answers (nothing has succeeded on it yet),
to a request that succeeded in the recording with a credential header the recording redacted and
the route does not send. The message then says it may be the credential; a real fault shows once the chain file
supplies it.

A recording may hold a credential in the query (`?key=...`, redacted like a header): the chain
file supplies it with `query = { key = "${KEY}" }` (`Route.url_for` puts it in), and a refusal of a
request whose query the recording redacted names that key.

Pure: an observation, its planned turn and its route in; the problem, or None, out.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxycheck.core.errors import BadInput
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.replay.chain import DIRECT, Chain, Route
from proxycheck.core.replay.plan import PlannedTurn

#: The answers a hop gives a request without (or with a wrong) credential.
REFUSED = frozenset({401, 403, 407})


class MissingCredential(BadInput):
    """A route refused a request the recording shows succeeding: its credential is missing or
    wrong. Bad input (the chain file's), exit 2: never evidence against a hop or the engine."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """What the first refused exchange shows."""

    route: str
    status: int
    session: str
    turn: int
    recorded_status: int
    hop: str | None  # the route's entry hop (None: the engine, on direct)
    inner: tuple[str, ...]  # the route's other hops, inward: one of them may be the one refusing
    hop_line: int | None
    forward: bool  # the entry hop is a forward proxy (407: Proxy-Authorization)
    redacted: tuple[str, ...]  # header/query names the recording redacted
    supplied: tuple[str, ...]  # header names the chain file gives that hop (or the engine)
    certain: bool = True  # a 401/403/407; else an error answer that may be the missing credential
    supplied_query: tuple[str, ...] = ()  # query parameter names the chain file gives that hop

    def message(self) -> str:
        who = f"hop {self.hop}" if self.hop else "the engine"
        if self.inner:
            who += f" (or one inside it: {', '.join(self.inner)})"
        said = f"route {self.route} answered HTTP {self.status} to {self.session} turn {self.turn}, which got {self.recorded_status} in the recording"
        if self.certain:
            said += f": {who} wants a credential the replay lacks (not a fault of the hop)"
        else:
            said += (f", before anything succeeded on this route: {who} may be refusing for want of the "
                     "credential the replay lacks, so this is no evidence of a fault yet")  # fmt: skip
        return f"{said}; {self._what()}; {self._where()}"

    def _what(self) -> str:
        if self.supplied or self.supplied_query:
            names = ", ".join([*self.supplied, *(f"query parameter {q}" for q in self.supplied_query)])
            return f"the chain file supplies {names} for it: check the value (it was refused)"
        headers = [r.partition(":")[2] for r in self.redacted if r.startswith("header:")]
        queries = [r.partition(":")[2] for r in self.redacted if r.startswith("query:")]
        if headers:
            return f"the recording redacted the header {', '.join(headers)}"
        if queries:
            return f"the recording redacted the query parameter {', '.join(queries)}"
        return "the recording shows no credential on this request (the client may have sent one the recorder does not know)"

    def _where(self) -> str:
        headers = [r.partition(":")[2] for r in self.redacted if r.startswith("header:")]
        queries = [r.partition(":")[2] for r in self.redacted if r.startswith("query:")]
        var = ((self.hop or "engine").upper().replace("-", "_").replace(".", "_")) + "_KEY"
        if queries and not headers and self.status != 407 and not self.forward and not self.supplied:
            line = f'query = {{ "{queries[0]}" = "${{{var}}}" }}'
            return self._supply(line)
        if self.status == 407 or self.forward:
            name = "proxy-authorization"
        else:
            name = next((h for h in headers if h != "proxy-authorization"), None) or "authorization"
        value = f"Bearer ${{{var}}}" if name in ("authorization", "proxy-authorization") else f"${{{var}}}"
        return self._supply(f'headers = {{ "{name}" = "{value}" }}')

    def _supply(self, line: str) -> str:
        if self.hop is None:
            return f"supply it under [engine_options]: {line}"
        at = f" (line {self.hop_line})" if self.hop_line else ""
        return f'supply it on [[hop]] name = "{self.hop}"{at}: {line}'


def refusal(obs: Observation, turn: PlannedTurn, route: Route, chain: Chain, *, first: bool = False) -> Refusal | None:
    """The refusal `obs` shows, if it is one: a 401/403/407 where the recording had a 2xx; or,
    when `first` (nothing has succeeded on the route yet), any error answer where the recording
    had a 2xx with a redacted credential header the route does not send."""
    recorded = turn.recorded.status
    if obs.status is None or obs.status < 400 or recorded is None or not 200 <= recorded < 300:
        return None
    certain = obs.status in REFUSED
    if not certain:
        sent = {name.lower() for name, _ in route.headers}
        dropped = [r.partition(":")[2] for r in turn.redacted if r.startswith("header:")]
        put_in = {name.lower() for name, _ in route.query}
        unsupplied = [r.partition(":")[2] for r in turn.redacted if r.startswith("query:")]
        missing = [n for n in dropped if n not in sent] + [n for n in unsupplied if n not in put_in]
        # Engines answer a missing key with 401 (vLLM, SGLang): the doubt is a gateway's.
        if not first or not route.hops or not missing:
            return None
    entry = route.hops[0] if route.hops and route.name != DIRECT else None
    hop = chain.hop(entry) if entry is not None else None
    own = hop.headers if hop is not None else chain.engine_headers  # what the refusing side is given
    supplied = tuple(sorted({name.lower() for name, _ in own}))
    own_query = hop.query if hop is not None else chain.engine_query
    return Refusal(
        route=route.name,
        status=obs.status,
        session=turn.session,
        turn=turn.turn,
        recorded_status=recorded,
        hop=entry,
        inner=tuple(route.hops[1:]) if entry is not None else (),
        hop_line=hop.line if hop is not None else None,
        forward=hop.forward if hop is not None else False,
        redacted=turn.redacted,
        supplied=supplied,
        certain=certain,
        supplied_query=tuple(sorted({name.lower() for name, _ in own_query})),
    )


def raise_if_refused(obs: Observation, turn: PlannedTurn, route: Route, chain: Chain, *, first: bool = False) -> None:
    """Raise `MissingCredential` (naming the chain file) when `obs` is a refusal."""
    found = refusal(obs, turn, route, chain, first=first)
    if found is not None:
        raise MissingCredential(chain.source, found.message())
