"""What a chain file supplies that the recording held redacted (a query parameter), and the
credentials a URL carries (userinfo): sent where they belong, refused where they would silently
replace a header, never shown (proxycheck.core.replay.chain)."""

from __future__ import annotations

import pytest

from proxycheck.core.errors import BadInput
from proxycheck.core.replay.chain import SUPPLIED_SHOWN, parse_chain, supply_query

pytestmark = pytest.mark.timeout(10)

ENV = {"KEY": "s3cret value/&=", "EDGE_KEY": "edge-k"}


def chain_of(text: str):
    return parse_chain(text, ENV, "chain.toml")


def error_of(text: str) -> str:
    with pytest.raises(BadInput) as raised:
        chain_of(text)
    return str(raised.value)


# --------------------------------------------------------------------------------------------
# query = { ... }

QUERY_CHAIN = """engine = "http://127.0.0.1:30000"
[engine_options]
query = { api_key = "${KEY}" }
[[hop]]
name = "edge"
url = "http://127.0.0.1:8080"
query = { key = "${EDGE_KEY}" }
"""


def test_a_supplied_query_parameter_replaces_the_redacted_value_and_nothing_else() -> None:
    chain = chain_of(QUERY_CHAIN)
    recorded = "http://h/v1/chat/completions?a%20b=1;2&api_key=[redacted]&c=x+y&e=%7E&&flag"
    sent = chain.route("direct").url_for(recorded)
    assert sent == ("http://127.0.0.1:30000/v1/chat/completions?a%20b=1;2&api_key=s3cret%20value%2F%26%3D"
                    "&c=x+y&e=%7E&&flag")  # fmt: skip


def test_a_supplied_parameter_goes_on_its_route_and_the_routes_outside_it_only() -> None:
    chain = chain_of(QUERY_CHAIN)
    recorded = "http://h/v1/x?key=[redacted]&api_key=[redacted]"
    # direct: the engine's own; via:edge: the engine's and edge's (as headers merge).
    assert chain.route("direct").url_for(recorded) == "http://127.0.0.1:30000/v1/x?key=[redacted]&api_key=s3cret%20value%2F%26%3D"
    assert chain.route("via:edge").url_for(recorded) == "http://127.0.0.1:8080/v1/x?key=edge-k&api_key=s3cret%20value%2F%26%3D"


def test_names_are_matched_as_the_recorder_redacts_them_and_absent_ones_are_not_added() -> None:
    supplied = (("API_Key", "v"),)
    assert supply_query("Api%5FKEY=[redacted]&x=1", supplied) == "Api%5FKEY=v&x=1"
    assert supply_query("x=1", supplied) == "x=1"
    assert supply_query("", supplied) == ""


def test_a_listing_shows_that_a_value_is_supplied_never_the_value() -> None:
    url = chain_of(QUERY_CHAIN).route("direct").url_for("http://h/v1/x?api_key=[redacted]", shown=True)
    assert url == f"http://127.0.0.1:30000/v1/x?api_key={SUPPLIED_SHOWN}"
    assert "s3cret" not in url


def test_a_runs_chain_document_keeps_query_names_only() -> None:
    doc = chain_of(QUERY_CHAIN).to_doc()
    assert doc["engine_query"] == ["api_key"] and doc["hops"][0]["query"] == ["key"]
    assert "s3cret" not in repr(doc) and "edge-k" not in repr(doc)


@pytest.mark.parametrize(
    "query, expected",
    [
        ('query = "api_key=1"', 'chain.toml:3: engine_options: query must be a table of name = value'),
        ("query = { api_key = 1 }", 'chain.toml:3: engine_options: query parameter "api_key": the value must be a string (in quotes)'),
        ('query = { api_key = "${NOPE}" }', 'chain.toml:3: engine_options: query parameter "api_key": ${NOPE} is not set in the environment'),
        ('query = { "" = "x" }', 'chain.toml:3: engine_options: query parameter name "" is empty or has a control character in it'),
        ('query = { k = "a", K = "b" }', 'chain.toml:3: engine_options: query parameter "K" is given twice (names are matched case-insensitively)'),
        ('querry = { k = "a" }', 'chain.toml:3: engine_options: unknown key "querry" (did you mean "query"?)'),
    ],
)
def test_a_bad_query_table_is_one_line_naming_the_file_and_line(query: str, expected: str) -> None:
    assert error_of(f'engine = "http://127.0.0.1:1"\n[engine_options]\n{query}\n') == expected


def test_unknown_keys_are_refused_in_every_table_alike() -> None:
    # A `header =` typo would silently drop the auth header: refused in [engine_options] as in [[hop]].
    assert error_of('engine = "http://e:1"\n[engine_options]\nheader = { A = "b" }\n') == (
        'chain.toml:3: engine_options: unknown key "header" (did you mean "headers"?)')
    assert error_of('engine = "http://e:1"\n[[hop]]\nname = "x"\nurl = "http://h:2"\nheader = { A = "b" }\n') == (
        'chain.toml:5: hop "x": unknown key "header" (did you mean "headers"?)')
    assert error_of('engine = "http://e:1"\nengines = 2\n').startswith('chain.toml:2: unknown key "engines"')


@pytest.mark.parametrize("key", ["url", "proxy"])
def test_an_unclosed_ipv6_host_in_a_hop_is_one_line(key: str) -> None:
    assert error_of(f'engine = "http://e:1"\n[[hop]]\nname = "x"\n{key} = "http://[::1"\n') == (
        f'chain.toml:4: hop "x": {key} is not a valid URL: "http://[::1" (invalid IPv6 URL)')


# --------------------------------------------------------------------------------------------
# userinfo


def test_userinfo_becomes_basic_authorization_on_the_routes_to_that_url_and_is_kept_nowhere() -> None:
    chain = chain_of('engine = "http://user:p%40ss@127.0.0.1:30000"\n[[hop]]\nname = "edge"\n'
                     'url = "http://127.0.0.1:8080"\n')  # fmt: skip
    direct = chain.route("direct")
    assert direct.base_url == "http://127.0.0.1:30000"
    assert dict(direct.headers) == {"Authorization": "Basic dXNlcjpwQHNz"}  # user:p@ss
    assert dict(chain.route("via:edge").headers) == {}  # its requests go to edge's URL, not the engine's
    assert "p%40ss" not in repr(chain) and "user" not in repr(chain.to_doc())
    assert direct.url_for("http://h/v1/x") == "http://127.0.0.1:30000/v1/x"


def test_a_forward_hop_in_front_of_a_url_with_userinfo_sends_it_to_that_url() -> None:
    chain = chain_of('engine = "http://127.0.0.1:1"\n[[hop]]\nname = "corp"\nproxy = "http://pu:pp@127.0.0.1:3128"\n'
                     '[[hop]]\nname = "edge"\nurl = "http://a:b@127.0.0.1:8080"\n')  # fmt: skip
    corp = chain.route("via:corp")
    assert corp.base_url == "http://127.0.0.1:8080" and dict(corp.headers) == {"Authorization": "Basic YTpi"}
    assert corp.proxy == "http://pu:pp@127.0.0.1:3128"  # the client needs it for Proxy-Authorization
    assert corp.shown_proxy == "http://***@127.0.0.1:3128"
    doc = chain.to_doc()
    assert doc["hops"][0]["proxy"] == "http://***@127.0.0.1:3128" and doc["hops"][1]["url"] == "http://127.0.0.1:8080"
    assert "pp" not in repr(doc) and "a:b" not in repr(doc)


@pytest.mark.parametrize(
    "text, expected",
    [
        ('engine = "http://u:pw@127.0.0.1:1"\n[engine_options]\nheaders = { Authorization = "Bearer x" }\n',
         "chain.toml:1: engine has userinfo (user:password@) in it, and route direct also sends the Authorization "
         "header from engine_options"),
        ('engine = "http://127.0.0.1:1"\n[engine_options]\nheaders = { authorization = "Bearer x" }\n'
         '[[hop]]\nname = "edge"\nurl = "http://u:pw@127.0.0.1:2"\n',
         'chain.toml:6: hop "edge": url has userinfo (user:password@) in it, and route via:edge also sends the '
         "Authorization header from engine_options"),
        ('engine = "http://u:pw@127.0.0.1:1"\n[[hop]]\nname = "corp"\nproxy = "http://127.0.0.1:3"\n'
         'headers = { Authorization = "Bearer x" }\n',
         'chain.toml:1: engine has userinfo (user:password@) in it, and route via:corp also sends the '
         'Authorization header from hop "corp"'),
        ('engine = "http://127.0.0.1:1"\n[[hop]]\nname = "corp"\nproxy = "http://u:pw@127.0.0.1:3"\n'
         'headers = { Proxy-Authorization = "Basic x" }\n',
         'chain.toml:4: hop "corp": proxy has userinfo (user:password@) in it, and route via:corp also sends the '
         'Proxy-Authorization header from hop "corp"'),
    ],
)
def test_userinfo_together_with_an_authorization_header_on_one_route_is_refused(text: str, expected: str) -> None:
    message = error_of(text)
    assert message.startswith(expected), message
    assert "pw" not in message and "\n" not in message


def test_userinfo_is_never_shown_in_an_error() -> None:
    message = error_of('engine = "http://alice:hunter2@127.0.0.1:99999"\n')
    assert "hunter2" not in message and "alice" not in message and "***@127.0.0.1:99999" in message
