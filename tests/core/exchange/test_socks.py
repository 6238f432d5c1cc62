"""A SOCKS5 proxy's refusals (proxycheck.core.exchange.socks): the stacks' words to one sentence
and back, and what a sentence that is not one of them must not be read as."""

from __future__ import annotations

import pytest

from proxycheck.core.exchange.socks import Refusal, auth_refused, code_of, refused, reply_in, unresolved_here


@pytest.mark.parametrize(("words", "code"), [
    ("Proxy Server could not connect: Connection refused.", 5),  # httpcore
    ("Proxy Server could not connect: Connection not allowed by ruleset.", 2),
    ("Proxy Server could not connect: Host unreachable.", 4),
    ("Connection refused by destination host", 5),  # python-socks
    ("Command not supported or protocol error", 7),
    ("General SOCKS server failure", 1),
    ("Proxy Server could not connect: UNKOWN.", None),  # httpcore's word for a code it does not know
    ("", None),
])  # fmt: skip
def test_the_stacks_words_name_the_reply_code(words: str, code: int | None) -> None:
    assert code_of(words) == code


def test_a_refusal_reads_back_with_its_code_and_target() -> None:
    text = refused("127.0.0.1:1080", "engine.lan:8000", 4)
    assert text == "SOCKS5 proxy 127.0.0.1:1080 would not connect to engine.lan:8000: reply 4 (host unreachable)"
    # As the stacks wrap it (aiohttp's ClientConnectorError, the observation's "Kind: ...").
    found = reply_in(f"ClientProxyConnectionError: Cannot connect to host engine.lan:8000 ssl:default [{text}]")
    assert found == Refusal("127.0.0.1:1080", "engine.lan:8000", 4)
    assert found.target_host == "engine.lan" and found.by_name


@pytest.mark.parametrize(("target", "by_name"), [("10.0.0.5:8000", False), ("[::1]:8000", False), ("gpu-box:80", True)])
def test_a_target_given_by_address_was_not_resolved_by_the_proxy(target: str, by_name: bool) -> None:
    found = reply_in(refused("p:1080", target, 4))
    assert found is not None and found.by_name is by_name


def test_an_authentication_refusal_has_no_code() -> None:
    found = reply_in(auth_refused("p:1080", "Invalid username/password"))
    assert found == Refusal("p:1080", "", None)


@pytest.mark.parametrize("detail", [
    "ConnectError: [Errno 111] Connection refused",  # the proxy itself not listening
    "ProxyError: 407 Proxy Authentication Required",  # an HTTP proxy
    refused("p:1080", "e:1", None, "Proxy Server could not connect: UNKOWN."),  # no code: nothing to read
    unresolved_here("engine.lan", "[Errno -2] Name or service not known"),  # the proxy was never asked
    "HTTP 502: SOCKS5 proxy p:1 would not connect to e:1 reply 5",  # not our sentence (no colon, no words)
])  # fmt: skip
def test_other_connect_errors_are_no_socks_reply(detail: str) -> None:
    assert reply_in(detail) is None
