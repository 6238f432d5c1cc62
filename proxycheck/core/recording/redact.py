"""Redaction of credentials before anything reaches a recording.

Recordings are shared with proxy maintainers and attached to bug reports, so secrets are removed
at record time, not at export time: a header that carried one is stored as the `REDACTED` marker,
a query parameter's value as `REDACTED_TEXT`, a JSON body field's value likewise. What was removed
is listed (`header:authorization`, `query:key`, `body:metadata.api_key`) so a replay knows which
credentials it has to supply from the chain file.

What is a credential, by default (`credential_name`): the explicit lists below, and every header,
query parameter and request body field whose NAME says it carries one: its words (split at `-`,
`_`, `.` and camelCase humps, case ignored) include token, secret, key, password/passwd/pwd, auth,
authorization, signature, credential(s) or cookie, or it is one of the run-together spellings
(`apikey`, `accesstoken`, `sessiontoken`, ...). Not credentials, although they look like one:

* counts and limits: the plural `tokens` (`max_tokens`, `prompt_tokens`, `budget_tokens`,
  `x-ratelimit-remaining-tokens`), and a credential word followed by count, limit, budget, usage,
  type, ids ... (`token_count`, `stop_token_ids`, `token_type`);
* `ALLOWED_NAMES` (`prompt_cache_key`, `idempotency-key`, `sec-websocket-key`) and the SDKs'
  metadata headers `x-stainless-*`.

In a JSON request body the walk reaches every depth, with three rules that keep what the model
sees byte for byte:

* the conversation is content, never a credential field: the top-level `CONTENT_KEYS` (`messages`,
  `input`, `contents`, `system`, `instructions`, `prompt`, ...) are not walked, so tool-call
  arguments, a thinking block's `signature` or Gemini's `thoughtSignature` stay as sent (a
  password typed into a prompt is what the model saw: redact it with an explicit body path);
* a JSON Schema (a tool's `parameters` / `input_schema`, a `response_format` schema) is not
  walked: a `password` PROPERTY there is a schema, not a secret;
* only string values are redacted: a number, boolean or null under a credential name (`"key": 3`)
  is kept, so no count or flag ever changes. Under a credential-named object or list every string
  is redacted (`"credentials": {"user": .., "pass": ..}`).

Explicit body paths (`RedactionPolicy.body_paths`) apply anywhere, content included, and replace
whatever value is there. Redaction edits the raw bytes in place: a body keeps its spacing, key
order and escapes, a URL every byte of its other query parameters; only the redacted values change.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable
from urllib.parse import unquote_plus

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

# The words of a name that say it carries a credential, and the run-together spellings of two.
CREDENTIAL_WORDS = frozenset(
    {
        "token", "secret", "secrets", "key", "keys", "password", "passwd", "pwd", "passphrase", "auth",
        "authorization", "signature", "credential", "credentials", "cookie", "cookies",
    }
)  # fmt: skip
CREDENTIAL_COMPOUNDS = frozenset(
    {
        "apikey", "xapikey", "accesskey", "secretkey", "privatekey", "authkey", "sessionkey", "subscriptionkey",
        "authtoken", "accesstoken", "refreshtoken", "sessiontoken", "idtoken", "apitoken", "securitytoken",
        "bearertoken", "clientsecret", "setcookie",
    }
)  # fmt: skip
# A credential word followed by one of these names a count or a kind, not a secret.
QUALIFIERS = frozenset(
    {
        "count", "counts", "limit", "limits", "budget", "budgets", "usage", "type", "types", "ids", "num",
        "length", "size", "index", "logprob", "logprobs",
    }
)  # fmt: skip
# Names that look like a credential and are not (compared with separators and case removed).
ALLOWED_NAMES = frozenset({"promptcachekey", "cachekey", "idempotencykey", "secwebsocketkey", "tokenid"})
ALLOWED_PREFIXES = ("x-stainless-",)
# Top-level request members that hold the conversation (what the model sees): never walked.
CONTENT_KEYS = frozenset(
    {
        "messages", "input", "inputs", "contents", "system", "system_instruction", "systemInstruction",
        "instructions", "prompt", "text", "input_ids",
    }
)  # fmt: skip
# A JSON Schema's own vocabulary: an object with a `type` of JSON Schema and only these members is one.
_SCHEMA_TYPES = frozenset({"object", "string", "number", "integer", "boolean", "array", "null"})
_SCHEMA_VOCABULARY = frozenset(
    {
        "type", "properties", "required", "items", "description", "title", "enum", "const", "default",
        "format", "additionalProperties", "nullable", "minimum", "maximum", "minLength", "maxLength",
        "pattern", "examples", "anyOf", "oneOf", "allOf", "not", "minItems", "maxItems", "propertyOrdering",
        "strict", "$ref", "$defs", "definitions", "$schema", "$id", "$comment", "uniqueItems", "prefixItems",
    }
)  # fmt: skip
_SCHEMA_MARKS = ("$schema", "$defs", "$ref", "definitions", "anyOf", "oneOf", "allOf")

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


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
    for headers and query names; body paths are dotted, e.g. `metadata.api_key`). `by_name`: also
    every name `credential_name` recognizes (the default)."""

    headers: frozenset[str] = DEFAULT_HEADERS
    query: frozenset[str] = DEFAULT_QUERY
    body_paths: tuple[str, ...] = ()
    enabled: bool = True
    by_name: bool = True

    @classmethod
    def default(cls) -> "RedactionPolicy":
        return cls()

    @classmethod
    def off(cls) -> "RedactionPolicy":
        return cls(frozenset(), frozenset(), (), enabled=False, by_name=False)

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
            self.by_name,
        )

    def secret_header(self, name: str) -> bool:
        return self.enabled and (name.lower() in self.headers or (self.by_name and credential_name(name)))

    def secret_query(self, name: str) -> bool:
        return self.enabled and (name.lower() in self.query or (self.by_name and credential_name(name)))


def name_words(name: str) -> list[str]:
    """The words of a name, lower case: `X-Amz-Security-Token`, `apiKey`, `XAuthToken`."""
    return [w.lower() for w in _WORD.findall(name)]


def credential_name(name: str) -> bool:
    """Whether a header, query parameter or body field of this name carries a credential (see the
    module docstring for the rule and its exceptions)."""
    if name.lower().startswith(ALLOWED_PREFIXES):
        return False
    words = name_words(name)
    if "".join(words) in ALLOWED_NAMES:
        return False
    for i, word in enumerate(words):
        if word in CREDENTIAL_COMPOUNDS:
            return True
        if word not in CREDENTIAL_WORDS:
            continue
        following = words[i + 1] if i + 1 < len(words) else ""
        if following in QUALIFIERS or (word == "token" and following == "id"):
            continue
        if word == "key" and i > 0 and words[i - 1] == "cache":
            continue
        return True
    return False


def redact_headers(
    headers: Iterable[tuple[str, str]], policy: RedactionPolicy
) -> tuple[Headers, list[str]]:
    """Headers with secret values replaced by REDACTED, and the names that were redacted."""
    out: list[tuple[str, HeaderValue]] = []
    removed: list[str] = []
    for name, value in headers:
        low = name.lower()
        if policy.secret_header(name):
            out.append((name, REDACTED))
            if f"header:{low}" not in removed:
                removed.append(f"header:{low}")
        else:
            out.append((name, value))
    return tuple(out), removed


def redact_url(url: str, policy: RedactionPolicy) -> tuple[str, list[str]]:
    """The URL with the values of secret query parameters replaced, and what was replaced.

    Userinfo (`https://user:pass@host`) is a credential too and is dropped. Every other byte of
    the URL stays as it was: the query is edited in place, value by value.
    """
    if not policy.enabled:
        return url, []
    removed: list[str] = []
    scheme_end = url.find("//")
    head_end = len(url)
    for mark in "?#":
        at = url.find(mark)
        if at != -1:
            head_end = min(head_end, at)
    if 0 <= scheme_end < head_end:
        start = scheme_end + 2
        slash = url.find("/", start, head_end)
        authority_end = head_end if slash == -1 else slash
        at = url.rfind("@", start, authority_end)
        if at != -1:
            url = url[:start] + url[at + 1 :]
            removed.append("url:userinfo")
    query_start, fragment = url.find("?"), url.find("#")
    if query_start != -1 and (fragment == -1 or query_start < fragment):
        query_end = len(url) if fragment == -1 else fragment
        query, query_removed = redact_query(url[query_start + 1 : query_end], policy)
        if query_removed:
            url = url[: query_start + 1] + query + url[query_end:]
            removed += query_removed
    return url, removed


def redact_query(query: str, policy: RedactionPolicy) -> tuple[str, list[str]]:
    """A raw query string with the values of secret parameters replaced in place (every other
    byte kept), and what was replaced. A parameter without `=` has no value to remove."""
    removed: list[str] = []
    parts = query.split("&")
    changed = False
    for i, part in enumerate(parts):
        name, eq, _ = part.partition("=")
        if not eq:
            continue
        decoded = unquote_plus(name)
        if policy.secret_query(decoded):
            parts[i] = f"{name}={REDACTED_TEXT}"
            changed = True
            removed.append(f"query:{decoded.lower()}")
    return ("&".join(parts) if changed else query), removed


# --------------------------------------------------------------------------------------------
# JSON bodies

Path = tuple[str | int, ...]
# application/x-www-form-urlencoded: name=value pairs joined by `&`, nothing else (no spaces, no
# line breaks), so that prose or a binary body is never taken for one.
_FORM_NAME = rb"[A-Za-z0-9._~%+\-\[\]]+"
_FORM = re.compile(_FORM_NAME + rb"=[^&\s]*(?:&" + _FORM_NAME + rb"(?:=[^&\s]*)?)*")


def redact_body(body: bytes, policy: RedactionPolicy) -> tuple[bytes, list[str]]:
    """A JSON request body with its secret values replaced, and the dotted paths replaced.

    Bodies without a secret are kept byte for byte (replays send recorded bodies exactly); one
    with secrets keeps every other byte too. A form-encoded body (`grant_type=..&client_secret=..`,
    an OAuth token request recorded under a filter) is redacted as a query is, by name. Other
    bodies that are not JSON: nothing to redact."""
    if not policy.enabled or not (policy.body_paths or policy.by_name):
        return body, []
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        if _FORM.fullmatch(body):
            form, removed = redact_query(body.decode("ascii"), policy)
            return form.encode("ascii"), [f"body:{r.partition(':')[2]}" for r in removed]
        return body, []  # neither JSON nor a form: there are no fields to redact
    except RecursionError:
        # Valid JSON nested too deep to walk: a secret could hide in it, so nothing of the body is kept.
        return TOO_DEEP.encode(), ["body:*"]
    targets: set[Path] = set()
    listed: list[str] = []
    for path in policy.body_paths:
        found = _path_targets(doc, path.split("."))
        if found:
            targets.update(found)
            listed.append(path)
    if policy.by_name:
        for found in _credential_fields(doc):
            targets.add(found)
            dotted = ".".join(str(k) for k in found if isinstance(k, str))
            if dotted not in listed:
                listed.append(dotted)
    if not targets:
        return body, []
    return _replace_in_place(body, doc, targets), [f"body:{p}" for p in listed]


def _path_targets(doc: Any, keys: list[str]) -> list[Path]:
    """The concrete paths an explicit dotted path names (list elements are searched at each step)."""
    out: list[Path] = []
    stack: list[tuple[Any, int, Path]] = [(doc, 0, ())]
    while stack:
        node, depth, at = stack.pop()
        if isinstance(node, list):
            stack.extend((item, depth, at + (i,)) for i, item in enumerate(node))
        elif isinstance(node, dict) and keys[depth] in node:
            if depth == len(keys) - 1:
                out.append(at + (keys[depth],))
            else:
                stack.append((node[keys[depth]], depth + 1, at + (keys[depth],)))
    return out


def looks_like_schema(node: Any) -> bool:
    """A JSON Schema (a tool's parameters, a structured-output schema): its member names are the
    user's property names, not fields of the request."""
    if not isinstance(node, dict):
        return False
    if isinstance(node.get("properties"), dict) or any(mark in node for mark in _SCHEMA_MARKS):
        return True
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    return (bool(kinds) and all(isinstance(k, str) and k.lower() in _SCHEMA_TYPES for k in kinds)
            and set(node) <= _SCHEMA_VOCABULARY)  # fmt: skip


def _credential_fields(doc: Any) -> list[Path]:
    """The paths of the string values the name rule redacts (module docstring), in document order."""
    out: list[Path] = []
    # (node, its path, inside a credential-named member)
    stack: list[tuple[Any, Path, bool]] = [(doc, (), False)]
    while stack:
        node, at, secret = stack.pop()
        if isinstance(node, dict):
            if at and not secret and looks_like_schema(node):
                continue
            items: Iterable[tuple[str | int, Any]] = node.items()
        elif isinstance(node, list):
            items = enumerate(node)
        else:
            continue
        children: list[tuple[Any, Path, bool]] = []
        for key, value in items:
            if not at and isinstance(node, dict) and key in CONTENT_KEYS:
                continue
            inner = secret or (isinstance(key, str) and credential_name(key))
            if isinstance(value, str):
                if inner:
                    out.append(at + (key,))
            elif isinstance(value, (dict, list)):
                children.append((value, at + (key,), inner))
        stack.extend(reversed(children))
    return out


# A JSON token: a string (unrolled for speed), a structural character, or a literal/number.
_TOKEN = re.compile(r'[ \t\r\n]*(?:("[^"\\]*(?:\\.[^"\\]*)*")|([{}\[\],:])|([^ \t\r\n{}\[\],:"]+))', re.S)


def _replace_in_place(body: bytes, doc: Any, targets: set[Path]) -> bytes:
    """`body` with the values at `targets` replaced by the JSON string REDACTED_TEXT, every other
    byte as it was. A body that is not UTF-8 (JSON may be UTF-16) is re-serialized instead."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return _reserialized(doc, targets)
    spans = _value_spans(text, targets)
    if spans is None:
        return _reserialized(doc, targets)
    replacement = json.dumps(REDACTED_TEXT)
    pieces: list[str] = []
    last = 0
    for start, end in spans:
        pieces.append(text[last:start])
        pieces.append(replacement)
        last = end
    pieces.append(text[last:])
    return "".join(pieces).encode("utf-8")


def _value_spans(text: str, targets: set[Path]) -> list[tuple[int, int]] | None:
    """The character spans of the values at `targets` (a repeated key: each of its values), in
    order; None if the text cannot be scanned (it always can once json.loads accepted it)."""
    spans: list[tuple[int, int]] = []
    # Each open container: [is_object, its path, the key or index of the next value, expecting a key,
    # where it started if it is itself a target]
    stack: list[list[Any]] = []
    pos = 1 if text.startswith("\ufeff") else 0
    while True:
        m = _TOKEN.match(text, pos)
        if m is None:
            break
        pos = m.end()
        string, punct = m.group(1), m.group(2)
        start = m.start(1) if string else m.start(2) if punct else m.start(3)
        top = stack[-1] if stack else None
        if punct in (",", ":"):
            if punct == "," and top is not None:
                if top[0]:
                    top[3] = True
                else:
                    top[2] += 1
            continue
        if punct in ("}", "]"):
            if not stack:
                return None
            closed = stack.pop()
            if closed[4] is not None:
                spans.append((closed[4], pos))
            if not stack:
                break
            continue
        if top is not None and top[0] and top[3]:  # an object's key
            if string is None:
                return None
            top[2] = json.loads(string)
            top[3] = False
            continue
        path: Path = () if top is None else top[1] + (top[2],)
        is_target = path in targets
        if punct in ("{", "["):
            stack.append([punct == "{", path, 0, punct == "{", start if is_target else None])
            continue
        if is_target:
            spans.append((start, pos))
        if top is None:
            break
    spans.sort()
    # A target inside a target (an explicit path and a field under it): keep the outer one.
    merged: list[tuple[int, int]] = []
    for span in spans:
        if merged and span[0] < merged[-1][1]:
            continue
        merged.append(span)
    return merged


def _reserialized(doc: Any, targets: set[Path]) -> bytes:
    for path in targets:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = REDACTED_TEXT
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
