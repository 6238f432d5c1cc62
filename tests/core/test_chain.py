"""The chain file: parsing, errors that name the file, routes and the ladder."""

from __future__ import annotations

import pytest

from proxycheck.core.chain import parse_chain
from proxycheck.core.errors import BadInput

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


@pytest.mark.parametrize(
    "text,message",
    [
        ("engine = ", "not valid TOML"),
        ('engine = "ftp://x"', "engine must be an http:// or https:// URL"),
        ('engine = "http://e:99999"', "bad port"),
        ('engine = "http://e"\nhops = 1', "unknown key(s): hops"),
        ('engine = "http://e"\n[[hop]]\nname = "a"', "give exactly one of url"),
        ('engine = "http://e"\n[[hop]]\nname = "a"\nurl = "http://a"\nproxy = "http://b"', "give exactly one of url"),
        ('engine = "http://e"\n[[hop]]\nname = "a b"\nurl = "http://a"', "name must be letters"),
        ('engine = "http://e"\n[[hop]]\nname = "a"\nurl = "http://a"\n[[hop]]\nname = "a"\nurl = "http://b"',
         "hop names must be unique: a"),
        ('engine = "http://e"\n[engine_options]\nheaders = { A = "${NOPE}" }', "uses ${NOPE}, which is not set"),
        ('engine = "http://e"\n[engine_options]\nverify = 3', "verify must be true, false or the path"),
    ],
)
def test_bad_chain_files_are_one_clear_line(text: str, message: str) -> None:
    with pytest.raises(BadInput, match=message.replace("$", r"\$").replace("(", r"\(").replace(")", r"\)")) as info:
        parse_chain(text, {}, "chain.toml")
    assert str(info.value).startswith("chain.toml: ")


def test_unknown_routes_list_the_known_ones() -> None:
    with pytest.raises(BadInput, match=r"unknown route 'edge' \(routes: direct, via:gateway, via:edge, via:corp\)"):
        chain().route("edge")
    with pytest.raises(BadInput, match=r"no hop named 'nope' \(hops: corp, edge, gateway\)"):
        chain().route("via:nope")
