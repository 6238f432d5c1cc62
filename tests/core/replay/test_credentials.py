"""A refused credential is told apart from a fault (proxycheck.core.replay.credentials): an observation,
its planned turn and its route in, the refusal (or None) out. Each case tries to make a refusal
out of something else, or to misname where the credential goes."""

from __future__ import annotations

import pytest

from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.replay.chain import parse_chain
from proxycheck.core.replay.credentials import MissingCredential, raise_if_refused, refusal
from proxycheck.core.replay.plan import PlannedTurn, RecordedOutcome

CHAIN = """engine = "http://127.0.0.1:30000"

[[hop]]
name = "corp"
proxy = "http://127.0.0.1:3128"

[[hop]]
name = "edge"
url = "http://127.0.0.1:8080"

[[hop]]
name = "gw"
url = "http://127.0.0.1:4000"
headers = { "x-api-key" = "${GW_KEY}" }
"""


@pytest.fixture
def chain():
    return parse_chain(CHAIN, {"GW_KEY": "k"}, "chain.toml")


def turn(recorded_status: int | None = 200, redacted: tuple[str, ...] = ("header:x-api-key",)) -> PlannedTurn:
    return PlannedTurn(
        session="s1", turn=3, xid=7, method="POST", url="http://h/v1/chat/completions", dialect="openai_chat",
        streamed=True, http_version="HTTP/1.1", headers=(), body=b"{}", think_time=None, new_connection=False,
        client_id=None, recorded=RecordedOutcome(Outcome.OK if recorded_status == 200 else Outcome.HTTP_ERROR, status=recorded_status),
        redacted=redacted,
    )  # fmt: skip


def obs(status: int | None) -> Observation:
    return Observation(t_start=0.0, status=status, outcome=Outcome.OK if status == 200 else Outcome.HTTP_ERROR)


@pytest.mark.parametrize("status", [401, 403])
def test_a_refusal_where_the_recording_succeeded_names_the_hop_the_header_and_the_line(chain, status: int) -> None:
    found = refusal(obs(status), turn(redacted=("header:authorization",)), chain.route("via:edge"), chain)
    assert found is not None
    text = found.message()
    assert text.startswith(f"route via:edge answered HTTP {status} to s1 turn 3, which got 200 in the recording")
    assert "hop edge (or one inside it: gw) wants a credential" in text
    assert "redacted the header authorization" in text
    assert 'on [[hop]] name = "edge" (line 8): headers = { "authorization" = "Bearer ${EDGE_KEY}" }' in text


def test_the_innermost_hop_route_names_only_that_hop(chain) -> None:
    # via:gw supplies x-api-key already: a refusal there means the key was wrong.
    text = refusal(obs(401), turn(), chain.route("via:gw"), chain).message()
    assert "hop gw wants" in text and "inside it" not in text
    assert "the chain file supplies x-api-key for it: check the value" in text


def test_a_forward_proxy_refusal_asks_for_proxy_authorization(chain) -> None:
    text = refusal(obs(407), turn(redacted=()), chain.route("via:corp"), chain).message()
    assert 'name = "corp" (line 4): headers = { "proxy-authorization" = "Bearer ${CORP_KEY}" }' in text
    assert "shows no credential" in text


def test_the_engine_refusing_on_direct_goes_under_engine_options(chain) -> None:
    text = refusal(obs(401), turn(), chain.route("direct"), chain).message()
    assert "the engine wants a credential" in text
    assert 'under [engine_options]: headers = { "x-api-key" = "${ENGINE_KEY}" }' in text


@pytest.mark.parametrize(
    "status, recorded",
    [
        (401, 401),  # refused in the recording too: the replay shows what the client saw
        (401, None),  # the recording never got an answer: nothing says a key was accepted
        (403, 500),
        (500, 200),  # a server error is a failure, judged as one
        (429, 200),
        (200, 200),
        (None, 200),  # no answer at all
    ],
)
def test_anything_else_is_not_a_refusal(chain, status: int | None, recorded: int | None) -> None:
    assert refusal(obs(status), turn(recorded), chain.route("via:edge"), chain) is None
    raise_if_refused(obs(status), turn(recorded), chain.route("via:edge"), chain)  # does not raise


def test_raised_as_bad_input_naming_the_chain_file(chain) -> None:
    with pytest.raises(MissingCredential) as raised:
        raise_if_refused(obs(401), turn(), chain.route("via:edge"), chain)
    assert str(raised.value).startswith("chain.toml: route via:edge answered HTTP 401")


def test_a_gateway_erring_before_anything_succeeded_may_be_refusing_for_the_redacted_key(chain) -> None:
    # LiteLLM without a database answers a missing master key with a bare 500.
    found = refusal(obs(500), turn(redacted=("header:authorization",)), chain.route("via:edge"), chain, first=True)
    assert found is not None and not found.certain
    assert "may be refusing for want of the credential" in found.message() and "no evidence of a fault yet" in found.message()


@pytest.mark.parametrize(
    "first, route, redacted",
    [
        (False, "via:edge", ("header:authorization",)),  # something succeeded on the route: a real failure
        (True, "direct", ("header:authorization",)),  # engines refuse with 401
        (True, "via:gw", ("header:x-api-key",)),  # the route sends that header already
        (True, "via:edge", ()),  # nothing was redacted
    ],
)
def test_an_error_answer_is_a_failure_when_a_missing_key_cannot_explain_it(chain, first: bool, route: str, redacted: tuple[str, ...]) -> None:
    assert refusal(obs(500), turn(redacted=redacted), chain.route(route), chain, first=first) is None


QUERY_CHAIN = CHAIN.replace('url = "http://127.0.0.1:4000"\n', 'url = "http://127.0.0.1:4000"\nquery = { key = "${GW_KEY}" }\n')


def test_a_refused_request_whose_query_key_was_redacted_asks_for_it_as_a_query_parameter(chain) -> None:
    text = refusal(obs(401), turn(redacted=("query:key",)), chain.route("via:edge"), chain).message()
    assert "the recording redacted the query parameter key" in text
    assert 'on [[hop]] name = "edge" (line 8): query = { "key" = "${EDGE_KEY}" }' in text


def test_a_query_key_the_chain_supplies_is_named_when_it_is_refused() -> None:
    chain = parse_chain(QUERY_CHAIN, {"GW_KEY": "k"}, "chain.toml")
    text = refusal(obs(403), turn(redacted=("query:key",)), chain.route("via:gw"), chain).message()
    assert "the chain file supplies x-api-key, query parameter key for it: check the value" in text


def test_a_gateway_erring_first_may_want_the_redacted_query_key_unless_the_route_supplies_it(chain) -> None:
    found = refusal(obs(500), turn(redacted=("query:key",)), chain.route("via:edge"), chain, first=True)
    assert found is not None and not found.certain
    supplied = parse_chain(QUERY_CHAIN, {"GW_KEY": "k"}, "chain.toml")
    assert refusal(obs(500), turn(redacted=("query:key",)), supplied.route("via:edge"), supplied, first=True) is None
