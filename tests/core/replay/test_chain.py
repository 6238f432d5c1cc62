"""The chain file: parsing, routes and the ladder, and validation of the whole file before any
traffic: every mistake is one BadInput naming the file and line."""

from __future__ import annotations

import h11
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxycheck.core.errors import BadInput
from proxycheck.core.replay.chain import Chain, Hop, doc_socks_hops, parse_chain

CHAIN = """
engine = "http://127.0.0.1:30000"

[engine_options]
headers = { Authorization = "Bearer ${ENGINE_API_KEY}" }

[[hop]]
name = "corp"
proxy = "http://127.0.0.1:3128"

[[hop]]
name = "edge"
url = "http://127.0.0.1:8080/prefix/"

[[hop]]
name = "gateway"
url = "https://127.0.0.1:4000"
headers = { "x-api-key" = "${GATEWAY_KEY}", Authorization = "Bearer gw-${ENGINE_API_KEY}" }
verify = "ca.pem"
"""
ENV = {"ENGINE_API_KEY": "k1", "GATEWAY_KEY": "g1"}


def chain():
    return parse_chain(CHAIN, ENV, "chain.toml")


def test_ladder_goes_from_the_engine_outward() -> None:
    assert chain().ladder() == ["direct", "via:gateway", "via:edge", "via:corp"]


def test_direct_and_reverse_routes() -> None:
    direct = chain().route("direct")
    assert direct.base_url == "http://127.0.0.1:30000" and direct.proxy is None
    assert direct.headers == (("Authorization", "Bearer k1"),)
    gateway = chain().route("via:gateway")
    assert gateway.base_url == "https://127.0.0.1:4000" and gateway.verify == "ca.pem"
    # The gateway's own Authorization replaces the engine's; its key is added.
    assert dict(gateway.headers) == {"Authorization": "Bearer gw-k1", "x-api-key": "g1"}
    assert chain().route("via:edge").hops == ("edge", "gateway")


def test_a_forward_hop_targets_the_next_reverse_hop_inward() -> None:
    corp = chain().route("via:corp")
    assert corp.proxy == "http://127.0.0.1:3128"
    assert corp.base_url == "http://127.0.0.1:8080/prefix/"
    only_forward = parse_chain('engine = "http://e:1"\n[[hop]]\nname = "p"\nproxy = "http://p:3128"\n', {}, "c")
    assert only_forward.route("via:p").base_url == "http://e:1"


def test_urls_keep_only_the_recorded_path_and_query() -> None:
    edge = chain().route("via:edge")
    assert edge.url_for("http://evil.example:9/v1/chat/completions?x=1") == "http://127.0.0.1:8080/prefix/v1/chat/completions?x=1"
    assert chain().route("direct").url_for("https://api.openai.com/v1/messages") == "http://127.0.0.1:30000/v1/messages"


def test_unknown_routes_list_the_known_ones() -> None:
    with pytest.raises(BadInput, match=r"unknown route 'edge' \(routes: direct, via:gateway, via:edge, via:corp\)"):
        chain().route("edge")
    with pytest.raises(BadInput, match=r"no hop named 'nope' \(hops: corp, edge, gateway\)"):
        chain().route("via:nope")


# --------------------------------------------------------------------------------------------
# Validation: each mistake is named with its file and line, before anything is sent

# Lines:   1 engine, 3 [engine_options], 4 verify, 6 [[hop]] corp, 7 name, 8 proxy,
#         10 [[hop]] edge, 11 name, 12 url; cases append from line 13 or replace a line.
BASE = """engine = "http://127.0.0.1:30000"

[engine_options]
verify = false

[[hop]]
name = "corp"
proxy = "http://127.0.0.1:3128"

[[hop]]
name = "edge"
url = "http://127.0.0.1:8080"
"""
BAD_ENV = {"KEY": "sk-line\n", "EMPTY": "", "SPACED": "sk-spaced "}
TCHARS = "!#$%&'*+-.^_`|~"


def error_of(text: str) -> str:
    with pytest.raises(BadInput) as info:
        parse_chain(text, BAD_ENV, "chain.toml")
    return str(info.value)


@pytest.mark.parametrize(
    "text,expected",
    [
        # header names
        (BASE + 'headers = { "x api key" = "k" }\n',
         'chain.toml:13: hop "edge": header name "x api key" is not a valid HTTP token (no spaces)'),
        (BASE + '[hop.headers]\nfine = "1"\n"x:y" = "1"\n', 'chain.toml:15: hop "edge": header name "x:y" is not a '
         "valid HTTP token (\":\" is not allowed; letters, digits and !#$%&'*+-.^_`|~ are)"),
        (BASE + 'headers = { "" = "v" }\n', 'chain.toml:13: hop "edge": a header name is empty'),
        (BASE + 'headers = { "x-ключ" = "v" }\n', 'chain.toml:13: hop "edge": header name "x-ключ" is not a valid HTTP '
         "token (\"к\" is not allowed; letters, digits and !#$%&'*+-.^_`|~ are)"),
        (BASE + 'headers = { Content-Length = "3" }\n', 'chain.toml:13: hop "edge": header "Content-Length" is the '
         "client's to set (it describes the connection or frames the body); remove it"),
        (BASE + 'headers = { "Transfer-Encoding" = "chunked" }\n', 'chain.toml:13: hop "edge": header '
         '"Transfer-Encoding" is the client\'s to set (it describes the connection or frames the body); remove it'),
        (BASE + 'headers = { X-A = "1", x-a = "2" }\n',
         'chain.toml:13: hop "edge": header "x-a" is given twice (header names are case-insensitive)'),
        # header values, as written and as expanded
        (BASE + 'headers = { A = "a\\r\\nb" }\n',
         'chain.toml:13: hop "edge": header "A": the value holds a line break (CR or LF), which would end the header'),
        (BASE + 'headers = { Authorization = "Bearer ${KEY}" }\n', 'chain.toml:13: hop "edge": header '
         '"Authorization": ${KEY} holds a line break (CR or LF), which would end the header'),
        (BASE + 'headers = { A = "a\\u0000b" }\n',
         'chain.toml:13: hop "edge": header "A": the value holds the control character U+0000'),
        (BASE + 'headers = { A = "5 €" }\n', 'chain.toml:13: hop "edge": header "A": the value holds U+20AC, '
         "not ASCII (HTTP clients send header values as ASCII)"),
        (BASE + 'headers = { A = "café" }\n', 'chain.toml:13: hop "edge": header "A": the value holds U+00E9, '
         "not ASCII (HTTP clients send header values as ASCII)"),
        (BASE + 'headers = { A = "${SPACED}" }\n', 'chain.toml:13: hop "edge": header "A": ${SPACED} ends with '
         "whitespace, which HTTP clients refuse in a header value"),
        (BASE + 'headers = { A = " x" }\n', 'chain.toml:13: hop "edge": header "A": the value starts with '
         "whitespace, which HTTP clients refuse in a header value"),
        (BASE + 'headers = { A = 3 }\n', 'chain.toml:13: hop "edge": header "A": the value must be a string (in quotes)'),
        (BASE + 'headers = { A = "${NOPE}" }\n',
         'chain.toml:13: hop "edge": header "A": ${NOPE} is not set in the environment'),
        (BASE + 'headers = { A = "${EMPTY}" }\n',
         'chain.toml:13: hop "edge": header "A": ${EMPTY} is empty in the environment'),
        (BASE + 'headers = "x"\n', 'chain.toml:13: hop "edge": headers must be a table of name = value'),
        # URLs
        ('engine = "http://[::1"\n', 'chain.toml:1: engine is not a valid URL: "http://[::1" (invalid IPv6 URL)'),
        ('engine = "http://h:99999"\n',
         'chain.toml:1: engine is not a valid URL: "http://h:99999" (port out of range 0-65535)'),
        ('engine = "http://h:0"\n', 'chain.toml:1: engine has a bad port in "http://h:0" (give one from 1 to 65535, or none)'),
        ('engine = "ftp://x"\n', 'chain.toml:1: engine must be an http:// or https:// URL with a host (got "ftp://x")'),
        ('engine = "127.0.0.1:30000"\n',
         'chain.toml:1: engine must be an http:// or https:// URL with a host (got "127.0.0.1:30000")'),
        ('engine = "http://:80"\n', 'chain.toml:1: engine must be an http:// or https:// URL with a host (got "http://:80")'),
        ('engine = "http://exa mple"\n',
         'chain.toml:1: engine has whitespace or a control character in it ("http://exa mple")'),
        ('engine = "http://a<b>"\n', 'chain.toml:1: engine has a host that is not a host name or address ("http://a<b>")'),
        ('engine = "http://e/v1?x=1"\n', "chain.toml:1: engine must not have a query or fragment: requests go to it "
         'with the recorded path and query ("http://e/v1?x=1")'),
        ('engine = 30000\n', "chain.toml:1: engine must be a URL string"),
        (BASE.replace('url = "http://127.0.0.1:8080"', 'url = "https://[::1]:99999"'),
         'chain.toml:12: hop "edge": url is not a valid URL: "https://[::1]:99999" (port out of range 0-65535)'),
        # a password in a URL is not shown
        (BASE.replace("http://127.0.0.1:3128", "http://user:s3cret@proxy:99999"),
         'chain.toml:8: hop "corp": proxy is not a valid URL: "http://***@proxy:99999" (port out of range 0-65535)'),
        # verify
        (BASE.replace("verify = false", "verify = 3"),
         "chain.toml:4: engine_options: verify must be true, false or the path of a CA file"),
        (BASE + 'verify = ""\n', 'chain.toml:13: hop "edge": verify must be true, false or the path of a CA file'),
        # hops
        (BASE.replace('name = "edge"', 'name = "ed ge"'), "chain.toml:11: hop[1]: name must be letters, digits, '.', "
         "'_' or '-', starting with a letter or digit (got \"ed ge\")"),
        (BASE.replace('name = "edge"', "name = 7"), "chain.toml:11: hop[1]: name must be letters, digits, '.', "
         "'_' or '-', starting with a letter or digit (got 7)"),
        (BASE.replace('name = "edge"\n', ""), "chain.toml:10: hop[1]: name must be letters, digits, '.', "
         "'_' or '-', starting with a letter or digit (no name)"),
        (BASE.replace('name = "edge"', 'name = "corp"'), "chain.toml:11: hop names must be unique: corp is given twice"),
        (BASE.replace('url = "http://127.0.0.1:8080"\n', ""),
         'chain.toml:10: hop "edge": give exactly one of url (a reverse hop) or proxy (a forward hop)'),
        (BASE + 'proxy = "http://p:1"\n',
         'chain.toml:10: hop "edge": give exactly one of url (a reverse hop) or proxy (a forward hop)'),
        ('engine = "http://e"\n[hop]\nname = "a"\n', "chain.toml:2: hop must be an array of tables ([[hop]], one per hop)"),
        ('engine = "http://e"\nengine_options = 1\n', "chain.toml:2: engine_options must be a table ([engine_options])"),
        # unknown keys, in every table
        ('hops = 1\nengine = "http://e"\n', 'chain.toml:1: unknown key "hops" (did you mean "hop"?)'),
        ('engine = "http://e"\n\n[engnie_options]\n', 'chain.toml:3: unknown key "engnie_options" (did you mean '
         '"engine_options"?)'),
        (BASE.replace("verify = false", "verify = false\nheader = {}"),
         'chain.toml:5: engine_options: unknown key "header" (did you mean "headers"?)'),
        (BASE + 'header = { A = "1" }\n', 'chain.toml:13: hop "edge": unknown key "header" (did you mean "headers"?)'),
        (BASE + "colour = 1\n", 'chain.toml:13: hop "edge": unknown key "colour" (known: name, url, proxy, headers, query, verify, point)'),
        (BASE.replace('name = "corp"', 'name = "corp"\n"ur l" = 1'),
         'chain.toml:8: hop "corp": unknown key "ur l" (did you mean "url"?)'),
        # TOML syntax: tomllib's line, on one line
        ('engine = "http://e"\n\nx = \n', "chain.toml:3: not valid TOML: Invalid value (column 5)"),
        ('engine = "http://e', "chain.toml:1: not valid TOML: Unterminated string (at the end of the file)"),
        (BASE + 'headers = { X-A = "1" }\n[hop.headers]\n',
         "chain.toml:14: not valid TOML: Cannot declare ('hop', 'headers') twice (column 13)"),
        ('engine = [\n"http://e"', "chain.toml:2: not valid TOML: Unclosed array (at the end of the file)"),
        # and what has no line
        ("[engine_options]\nverify = true\n",
         "chain.toml: no engine: give engine = \"http://HOST:PORT\", the inference engine's URL"),
    ],
)
def test_each_mistake_is_one_line_naming_the_file_and_line(text: str, expected: str) -> None:
    message = error_of(text)
    assert message == expected
    assert len(message.splitlines()) == 1
    assert "s3cret" not in message and "sk-" not in message  # credentials are never shown


@pytest.mark.parametrize(
    "text,expected",
    [
        # A sub-table of headers: the line of the header inside it.
        ('engine = "http://e"\n[engine_options.headers]\nA = "ok"\n"B C" = "x"\n',
         'chain.toml:4: engine_options: header name "B C" is not a valid HTTP token (no spaces)'),
        # Dotted keys.
        ('engine = "http://e"\n[engine_options]\nheaders.A = "ok"\nheaders."B C" = "x"\n',
         'chain.toml:4: engine_options: header name "B C" is not a valid HTTP token (no spaces)'),
        # A key of a header table that is also a hop's key ("name") is not taken for the hop's name.
        ('engine = "http://e"\n[[hop]]\nheaders = { name = "x" }\nname = "a"\nurl = "http://a"\n'
         '[[hop]]\nname = "a"\nurl = "http://b"\n', "chain.toml:7: hop names must be unique: a is given twice"),
        # Tables written inline: the line that holds them.
        ('engine = "http://e"\nengine_options = { header = {} }\n',
         'chain.toml:2: engine_options: unknown key "header" (did you mean "headers"?)'),
        ('engine = "http://e"\nhop = [\n  { name = "a", url = "http://a" },\n  { name = "b", url = "ftp://b" },\n]\n',
         'chain.toml:2: hop "b": url must be an http:// or https:// URL with a host (got "ftp://b")'),
        # Lines end at LF, as TOML's do: CRLF files, and a U+2028 inside a key, leave the count alone.
        ('engine = "http://e"\r\n[engine_options]\r\nheaders = { "a b" = "1" }\r\n',
         'chain.toml:3: engine_options: header name "a b" is not a valid HTTP token (no spaces)'),
        ('engine = "http://e"\n[engine_options.headers]\n"x\u2028y" = "1"\n',
         'chain.toml:3: engine_options: header name "x\\u2028y" is not a valid HTTP token ("\\u2028" is not allowed; '
         "letters, digits and !#$%&'*+-.^_`|~ are)"),
        # Comments and quoting in headers; a key named like a value elsewhere.
        ('engine = "http://e"  # url\n[ "engine_options" ] # the options\nverify = true\n"url" = "x"\n',
         'chain.toml:4: engine_options: unknown key "url" (known: headers, query, verify, point)'),
    ],
)
def test_lines_are_found_however_the_toml_spells_the_key(text: str, expected: str) -> None:
    assert error_of(text) == expected


def test_good_chains_still_load_unchanged() -> None:
    text = """# a comment
engine = "http://[::1]:30000/base"
[engine_options.headers]
Authorization = "Bearer ${ENGINE_API_KEY}"
"X-Tab" = "a\tb"
[[hop]]
name = "corp.proxy-1"
proxy = "http://user:pw@127.0.0.1:3128"
verify = false
[[hop]]
name = "edge"
url = "https://edge.example:8443/"
headers.Host = "llm.internal"
headers."%s" = "v"
verify = "ca.pem"
""" % ("x" + TCHARS)
    assert parse_chain(text, ENV, "chain.toml") == Chain(
        engine="http://[::1]:30000/base",
        engine_headers=(("Authorization", "Bearer k1"), ("X-Tab", "a\tb")),
        engine_verify=True,
        hops=(
            Hop("corp.proxy-1", proxy="http://user:pw@127.0.0.1:3128", verify=False),
            Hop("edge", url="https://edge.example:8443/", headers=(("Host", "llm.internal"), ("x" + TCHARS, "v")),
                verify="ca.pem"),
        ),
        source="chain.toml",
    )  # fmt: skip


# The oracle for the property below, written from RFC 9110 independently of the module: a token
# of tchars, not a header the client sets per connection or body (7.6.1, and the framing), and a
# value of visible ASCII with spaces or tabs only between them.
CLIENT_OWNED = ["connection", "content-length", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                "upgrade"]  # fmt: skip


def is_token(name: str) -> bool:
    return bool(name) and all(c.isascii() and (c.isalnum() or c in TCHARS) for c in name)


def is_clean_value(value: str) -> bool:
    return all(0x20 <= ord(c) <= 0x7E or c == "\t" for c in value) and value == value.strip(" \t")


def toml_string(text: str) -> str:
    """`text` as a TOML basic string (what cannot be written literally, escaped)."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


HEADER_TEXT = (
    st.text(st.characters(codec="utf-8"), max_size=12)
    | st.text(st.characters(codec="ascii"), max_size=12)
    | st.from_regex(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,10}", fullmatch=True)
) | st.sampled_from(
    ["x-api-key", "Authorization", "x api", "a:b", "", "Content-Length", "TE", "name", "headers", 'q"uote', "back\\slash",
     "sk-\n", " sk", "sk\t", "ok\tok"]
)


@settings(max_examples=300, deadline=None)
@given(name=HEADER_TEXT, value=HEADER_TEXT, from_env=st.booleans())
def test_any_header_either_loads_sendable_or_is_bad_input_at_its_line(name: str, value: str, from_env: bool) -> None:
    env = {"V": value} if from_env else {}
    written = "${V}" if from_env else value
    text = BASE + f"[hop.headers]\nfine = \"1\"\n{toml_string(name)} = {toml_string(written)}\n"
    try:
        chain = parse_chain(text, env, "chain.toml")
    except BadInput as exc:
        message = str(exc)
        assert len(message.splitlines()) == 1 and "\r" not in message
        # The line of the header (15); or of the table, when a duplicate TOML key is what is wrong.
        assert message.startswith(("chain.toml:15: ", "chain.toml:14: ")), message
        # A header every client can send is never refused ("fine" is the header before it).
        assert not (is_token(name) and name.lower() not in CLIENT_OWNED + ["fine"] and value
                    and is_clean_value(value)), message  # fmt: skip
        return
    sent = dict(chain.route("via:edge").headers)
    assert sent[name] == value
    # What loads is what the clients send as it is: httpx (ASCII), and h11's RFC 9110 checks.
    request = httpx.Request("POST", "http://e/", headers={name: value})
    assert request.headers.raw[-1] == (name.encode(), value.encode("ascii"))
    h11.Request(method="POST", target="/", headers=[("Host", "e"), (name, value)])
    assert is_token(name) and name.lower() not in CLIENT_OWNED and is_clean_value(value)


# -- SOCKS5 hops -------------------------------------------------------------------------------

SOCKS_ENV = {"SOCKS_USER": "me", "SOCKS_PASS": "p@ss:w/rd"}


def socks_chain(proxy: str, env: dict[str, str] = SOCKS_ENV) -> Chain:
    return parse_chain(f'engine = "http://127.0.0.1:30000"\n[[hop]]\nname = "dante"\nproxy = "{proxy}"\n', env,
                       "chain.toml")  # fmt: skip


@pytest.mark.parametrize("scheme", ["socks5", "socks5h"])
def test_a_socks_hop_is_a_forward_hop_to_the_engine(scheme: str) -> None:
    chain = socks_chain(f"{scheme}://127.0.0.1:1080")
    route = chain.route("via:dante")
    assert (route.base_url, route.proxy, route.hops) == ("http://127.0.0.1:30000", f"{scheme}://127.0.0.1:1080", ("dante",))
    assert route.socks and chain.hops[0].socks and chain.socks_hops() == frozenset({"dante"})
    assert doc_socks_hops(chain.to_doc()) == frozenset({"dante"})  # what `diff` reads from run.json
    assert not chain.route("direct").socks


def test_an_http_proxy_is_no_socks_hop() -> None:
    chain = socks_chain("http://127.0.0.1:3128")
    assert not chain.route("via:dante").socks and chain.socks_hops() == frozenset()


def test_socks_credentials_come_from_the_environment_encoded_and_are_never_shown() -> None:
    chain = socks_chain("socks5h://${SOCKS_USER}:${SOCKS_PASS}@127.0.0.1:1080")
    route = chain.route("via:dante")
    assert route.proxy == "socks5h://me:p%40ss%3Aw%2Frd@127.0.0.1:1080"  # the clients decode it
    assert route.shown_proxy == "socks5h://***@127.0.0.1:1080"
    assert chain.to_doc()["hops"][0]["proxy"] == "socks5h://***@127.0.0.1:1080"
    assert "p@ss" not in repr(chain.to_doc())
    # A literal user and password stay as written (percent-encoding and all).
    assert socks_chain("socks5://u:p%40x@h:1080").route("via:dante").proxy == "socks5://u:p%40x@h:1080"


@pytest.mark.parametrize(("proxy", "env", "message"), [
    ("socks5://127.0.0.1", SOCKS_ENV,
     'chain.toml:4: hop "dante": proxy must give the SOCKS proxy\'s port (socks5://HOST:PORT; got "socks5://127.0.0.1")'),
    ("socks4://127.0.0.1:1080", SOCKS_ENV,
     'chain.toml:4: hop "dante": proxy must be an http://, https://, socks5:// or socks5h:// URL with a host '
     '(got "socks4://127.0.0.1:1080")'),
    ("socks5://h:1080/x", SOCKS_ENV,
     'chain.toml:4: hop "dante": proxy must be socks5://HOST:PORT with nothing after it (got "socks5://h:1080/x")'),
    ("socks5h://${NOPE}:x@h:1080", SOCKS_ENV, 'chain.toml:4: hop "dante": proxy: ${NOPE} is not set in the environment'),
    ("socks5://u:${LONG}@h:1080", {"LONG": "x" * 256},
     'chain.toml:4: hop "dante": proxy: a SOCKS5 user or password is at most 255 bytes'),
    # The host is checked with the credentials taken out, and never shown with them.
    ("socks5://u:${SOCKS_PASS}@:1080", SOCKS_ENV,
     'chain.toml:4: hop "dante": proxy must be an http://, https://, socks5:// or socks5h:// URL with a host '
     '(got "socks5://***@:1080")'),
])  # fmt: skip
def test_socks_proxy_mistakes_are_one_line(proxy: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(BadInput) as err:
        socks_chain(proxy, env)
    assert str(err.value) == message
    assert "p@ss" not in str(err.value)
