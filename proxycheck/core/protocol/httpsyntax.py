"""What HTTP allows in a header field (RFC 9110), and what the client stacks will send.

A header the client stack cannot send (a name with a space, a value with CR/LF) fails inside the
client before a byte reaches the network; classified as a network failure it would blame a hop or
the engine for a local mistake. The chain file (`proxycheck.core.replay.chain`), the replayer's last
check before sending (`proxycheck.io.observe`), the recorder's redaction options and the command
line use these rules, so the mistake is named where it was made.

Values are held to what httpx and h11 send: visible ASCII and tabs inside, no whitespace at either
end (httpx encodes header strings as ASCII; h11 refuses surrounding whitespace and control
characters; CR, LF and NUL would split or end the header anywhere).
"""

from __future__ import annotations

import re

#: An RFC 9110 token: the characters a header name may have (use `fullmatch`: `$` would let a
#: trailing newline through).
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def header_name_problem(name: str) -> str | None:
    """Why `name` cannot be a header name, or None."""
    if not name:
        return "a header name is empty"
    if HEADER_NAME.fullmatch(name):
        return None
    if " " in name:
        why = "no spaces"
    else:
        bad = next(c for c in name if not HEADER_NAME.fullmatch(c))
        why = f"{bad!r} is not allowed; letters, digits and !#$%&'*+-.^_`|~ are"
    return f"header name {name!r} is not a valid HTTP token ({why})"


def value_problem_at(value: str) -> tuple[int, str] | None:
    """Where and why `value` cannot be sent as a header value (the problem is worded about
    "it", for the caller to name the value or where it came from), or None."""
    for position, char in enumerate(value):
        if char in "\r\n":
            return position, "holds a line break (CR or LF), which would end the header"
        if char == "\t":
            continue
        if ord(char) < 0x20 or ord(char) == 0x7F:
            return position, f"holds the control character U+{ord(char):04X}"
        if ord(char) > 0x7E:
            return position, f"holds U+{ord(char):04X}, not ASCII (HTTP clients send header values as ASCII)"
    if value[:1] in (" ", "\t"):
        return 0, "starts with whitespace, which HTTP clients refuse in a header value"
    if value[-1:] in (" ", "\t"):
        return len(value) - 1, "ends with whitespace, which HTTP clients refuse in a header value"
    return None


def header_problem(name: str, value: str) -> str | None:
    """Why the header `name: value` cannot be sent, or None. The value is never quoted (it is
    often a credential)."""
    problem = header_name_problem(name)
    if problem is None and (found := value_problem_at(value)) is not None:
        problem = f"the value of header {name!r} {found[1]}"
    return problem
