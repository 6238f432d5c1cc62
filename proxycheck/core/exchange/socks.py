"""What a SOCKS5 proxy said when it would not relay a connection, in words both client stacks share.

A SOCKS5 proxy answers a client's CONNECT with a reply code (RFC 1928 section 6): 0 is success,
the others say why it did not connect to the target (2 its rules forbid it, 4 the host is
unreachable, 5 the target refused ...), or it refuses the client's authentication (RFC 1929)
before that. httpx (socksio) and aiohttp (aiohttp-socks) say these in words of their own;
`proxycheck.io.proxying` rewrites each into one sentence made here (`refused`, `auth_refused`),
so that an observation's detail reads the same whichever stack replayed it, and the advice
reads the reply back from it (`reply_in`) to name the setting behind it.

Pure: words in, words out.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

#: RFC 1928's reply codes, in the words a report uses.
REPLIES = {
    1: "general SOCKS server failure",
    2: "connection not allowed by ruleset",
    3: "network unreachable",
    4: "host unreachable",
    5: "connection refused",
    6: "TTL expired",
    7: "command not supported",
    8: "address type not supported",
}
# How the stacks' own messages name a reply (httpcore's REPLY_CODES, python-socks' ReplyMessages),
# lower case, to the code: the stacks do not all keep the number.
_STACK_WORDS = {
    "general socks server failure": 1,
    "connection not allowed by ruleset": 2,
    "network unreachable": 3,
    "host unreachable": 4,
    "connection refused": 5,
    "connection refused by destination host": 5,
    "ttl expired": 6,
    "command not supported": 7,
    "command not supported or protocol error": 7,
    "address type not supported": 8,
}
_REFUSED = re.compile(r"SOCKS5 proxy (\S+) would not connect to (\S+): reply (\d+) \(")
_AUTH = re.compile(r"SOCKS5 proxy (\S+) refused the authentication")


@dataclass(frozen=True, slots=True)
class Refusal:
    """A SOCKS5 proxy's refusal, as read back from an observation's detail."""

    proxy: str  # host:port of the proxy
    target: str  # host:port it was asked to connect to ("" for an authentication refusal)
    code: int | None  # the reply code; None for an authentication refusal

    @property
    def target_host(self) -> str:
        host = self.target.rpartition(":")[0]
        return host[1:-1] if host.startswith("[") else host

    @property
    def by_name(self) -> bool:
        """The proxy was given a host name (not an address) to connect to: it had to resolve it."""
        try:
            ipaddress.ip_address(self.target_host)
        except ValueError:
            return bool(self.target_host)
        return False


def code_of(stack_words: str) -> int | None:
    """The reply code a stack's message names (`Proxy Server could not connect: Host unreachable.`,
    `Connection refused by destination host`), or None when it names none."""
    text = stack_words.strip().rstrip(".").lower()
    text = text.rpartition(": ")[2] if text not in _STACK_WORDS else text
    return _STACK_WORDS.get(text)


def refused(proxy: str, target: str, code: int | None, stack_words: str = "") -> str:
    """The sentence for a proxy that answered CONNECT with a failure `code` (None: a reply the
    stack could not name, its own words kept)."""
    if code is None:
        return f"SOCKS5 proxy {proxy} would not connect to {target}: {stack_words.strip() or 'no reason given'}"
    return f"SOCKS5 proxy {proxy} would not connect to {target}: reply {code} ({REPLIES.get(code, 'unknown reply')})"


def auth_refused(proxy: str, stack_words: str) -> str:
    """The sentence for a proxy that refused the client's authentication (method or password)."""
    return f"SOCKS5 proxy {proxy} refused the authentication: {stack_words.strip()}"


def unresolved_here(host: str, error: object) -> str:
    """The sentence for a `socks5://` target whose name this machine could not resolve (the
    proxy was never asked)."""
    return f"cannot resolve {host} (socks5:// resolves it here; socks5h:// lets the proxy resolve it): {error}"


def reply_in(detail: str) -> Refusal | None:
    """The SOCKS5 refusal an observation's detail carries, if any (`refused`, `auth_refused`)."""
    found = _REFUSED.search(detail)
    if found:
        return Refusal(found.group(1), found.group(2), int(found.group(3)))
    found = _AUTH.search(detail)
    if found:
        return Refusal(found.group(1), "", None)
    return None
