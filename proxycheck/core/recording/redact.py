"""Redaction of credentials before anything reaches a recording.

Recordings are shared with proxy maintainers and attached to bug reports, so secrets are removed
at record time, not at export time: a header that carried one is stored as the `REDACTED` marker,
a query parameter's value as `REDACTED_TEXT`, a JSON body field's value likewise. What was removed
is listed (`header:authorization`, `query:key`, `body:metadata.api_key`) so a replay knows which
credentials it has to supply from the chain file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED_TEXT = "[redacted]"
TOO_DEEP = "[redacted: the body is nested too deeply to redact field by field]"

DEFAULT_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "cookie",
        "set-cookie",
        "x-goog-api-key",
        "openai-organization",
        "openai-project",
        "x-proxycheck-auth",
    }
)
DEFAULT_QUERY = frozenset(
    {"key", "api_key", "api-key", "apikey", "token", "access_token", "auth", "sig", "signature"}
)


class Redacted:
    """The marker stored in place of a header value that carried a secret."""

    _instance: "Redacted | None" = None

    def __new__(cls) -> "Redacted":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REDACTED"

    def __reduce__(self) -> str:
        return "REDACTED"


REDACTED = Redacted()

HeaderValue = str | Redacted
Headers = tuple[tuple[str, HeaderValue], ...]


@dataclass(frozen=True, slots=True)
class RedactionPolicy:
    """Which header names, query parameters and JSON body paths are secrets (case-insensitive
    for headers and query names; body paths are dotted, e.g. `metadata.api_key`)."""

    headers: frozenset[str] = DEFAULT_HEADERS
    query: frozenset[str] = DEFAULT_QUERY
    body_paths: tuple[str, ...] = ()
    enabled: bool = True

    @classmethod
    def default(cls) -> "RedactionPolicy":
        return cls()

    @classmethod
    def off(cls) -> "RedactionPolicy":
        return cls(frozenset(), frozenset(), (), enabled=False)

    def extended(
        self,
        headers: Iterable[str] = (),
        query: Iterable[str] = (),
        body_paths: Iterable[str] = (),
    ) -> "RedactionPolicy":
        return RedactionPolicy(
            self.headers | {h.lower() for h in headers},
            self.query | {q.lower() for q in query},
            self.body_paths + tuple(body_paths),
            self.enabled,
        )


def redact_headers(
    headers: Iterable[tuple[str, str]], policy: RedactionPolicy
) -> tuple[Headers, list[str]]:
    """Headers with secret values replaced by REDACTED, and the names that were redacted."""
    out: list[tuple[str, HeaderValue]] = []
    removed: list[str] = []
    for name, value in headers:
        low = name.lower()
        if policy.enabled and low in policy.headers:
            out.append((name, REDACTED))
            if f"header:{low}" not in removed:
                removed.append(f"header:{low}")
        else:
            out.append((name, value))
    return tuple(out), removed


def redact_url(url: str, policy: RedactionPolicy) -> tuple[str, list[str]]:
    """The URL with the values of secret query parameters replaced, and what was replaced.

    Userinfo (`https://user:pass@host`) is a credential too and is dropped.
    """
    if not policy.enabled:
        return url, []
    parts = urlsplit(url)
    removed: list[str] = []
    netloc = parts.netloc
    if "@" in netloc:
        netloc = netloc.rsplit("@", 1)[1]
        removed.append("url:userinfo")
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k.lower() in policy.query for k, _ in pairs):
            new_pairs = []
            for k, v in pairs:
                if k.lower() in policy.query:
                    new_pairs.append((k, REDACTED_TEXT))
                    removed.append(f"query:{k.lower()}")
                else:
                    new_pairs.append((k, v))
            query = urlencode(new_pairs, safe="[]")
    if not removed:
        return url, []
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)), removed


def redact_body(body: bytes, policy: RedactionPolicy) -> tuple[bytes, list[str]]:
    """A JSON body with the values at the policy's body paths replaced.

    Bodies are only rewritten when a configured path is present: otherwise the original bytes are
    kept exactly (replays send recorded bodies byte for byte).
    """
    if not (policy.enabled and policy.body_paths):
        return body, []
    try:
        doc = json.loads(body)
        removed = [path for path in policy.body_paths if _replace_path(doc, path.split("."))]
    except (ValueError, UnicodeDecodeError):
        return body, []  # not JSON: there are no fields to redact
    except RecursionError:
        # Valid JSON nested too deep to walk: a configured secret could hide in it, so nothing
        # of the body is kept.
        return TOO_DEEP.encode(), ["body:*"]
    if not removed:
        return body, []
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode(), [
        f"body:{p}" for p in removed
    ]


def _replace_path(doc: Any, keys: list[str]) -> bool:
    """Replace the value at `keys` (list elements are searched too); True if any was found."""
    if isinstance(doc, list):
        hits = [_replace_path(item, keys) for item in doc]
        return any(hits)
    if not isinstance(doc, dict) or keys[0] not in doc:
        return False
    if len(keys) == 1:
        doc[keys[0]] = REDACTED_TEXT
        return True
    return _replace_path(doc[keys[0]], keys[1:])
