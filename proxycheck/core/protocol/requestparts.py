"""What the model sees in a request body, and how to tell a change in it from a re-serialization.

Gateways re-serialize request JSON (LiteLLM: other key order and spacing, escapes, `1` spelled
`1.0`) and add members the model never sees (`stream_options`, `user`, `metadata`); some also
change what it does see (they trim the context, rewrite sampling parameters, drop tools). This
module owns telling the two apart, the same way on both ends: the reference engine describes the
request it received, and the client compares that description with the body it sent.

* `canonical_json`: one serialization per JSON value (sorted keys, compact separators, UTF-8,
  integral numbers without a fraction), so two spellings of the same JSON give the same bytes.
* `parts_of`: the *view* of a body, what the model sees, cut into parts: the messages (OpenAI
  chat `messages`, Anthropic `messages`, Responses `input`, Gemini `contents`), the system prompt
  (Anthropic `system`, Responses `instructions`), the prompt of prompt-string APIs (completions
  `prompt`, SGLang `text` / `input_ids`), the tools, and the parameters that shape generation
  (`_PARAMS`; SGLang's `sampling_params` members count as parameters of their own name). The
  `model` name is kept beside the view, not in it: gateways map aliases to engine model names.
* `encode_parts` / `decode_parts`: the parts as one compact header (`PARTS_HEADER`), bounded to
  `HEADER_LIMIT` characters; a history too long for one digest per message is described in
  content-defined runs of messages instead, and the header says so.
* `compare(sent, received)`: a `Change`: whether the view differs, and a short semantic diff
  ("messages 14 -> 6: the first 8 dropped", "temperature 0.2 -> 1").
* `judge`: the client's whole decision from the engine's headers, down to the raw digest when
  the engine sends nothing better (an older engine) or the body is not JSON.

What is the same (tested in tests/core/test_requestparts.py):

* key order, whitespace, duplicate keys (the last one counts, as every JSON parser does) and
  string escapes: `"\\u00e9"` and `"é"` are one string;
* numbers by value: `1`, `1.0` and `1e0` are one number (a gateway that parses into floats
  writes `1.0`); `0.1` and `0.10000000000000001` are one float;
* in the view only: a member whose value is `null` and an absent member (null means "not
  given" in these APIs), at the top level, in each message and in each tool; a content list of
  exactly one text part (`[{"type": "text", "text": S}]`) and the string S; `max_tokens`,
  `max_completion_tokens`, Responses `max_output_tokens` and SGLang `max_new_tokens` are one
  parameter (`max_tokens`; `max_completion_tokens` wins when both are given, as in vLLM), and so
  are `stop` and Anthropic `stop_sequences`, a single stop string and a list of it; a Responses
  `input` string and one user message of it.

What differs: anything else, in particular Unicode normalization (`"é"` precomposed and `"e"` +
combining accent are other tokens to a model), `true` and `1`, a parameter given with its
default value and one left out (engines apply their own defaults, which may not be the API's),
and message content spelled as several parts instead of one string.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import quote, unquote

# The reference engine's headers about the request it received: the digest and size of the body
# as it arrived (a hop that altered the request is caught by comparing with what was sent), the
# digest of the body's canonical JSON (a re-serialized body has the same), and the parts of what
# the model sees. Clients read them (`proxycheck.core.exchange.outcomes`); the engine writes them.
SHA_HEADER = "x-proxycheck-request-sha256"
BYTES_HEADER = "x-proxycheck-request-bytes"
CANONICAL_HEADER = "x-proxycheck-request-canonical-sha256"
PARTS_HEADER = "x-proxycheck-request-parts"
# The largest parts header: clients and proxies limit a header line (aiohttp and nginx to about
# 8 KB, h11 the whole head to 16 KB), and the answer carries other headers too.
HEADER_LIMIT = 3800
FORMAT = "1"  # the first field of the parts header

_SHORT = 8  # hex digits of a part's digest in the header (32 bits: a chance collision is 2^-32)
_VIEW_SHORT = 16  # hex digits of the view's digest in the header
_VALUE_MAX = 40  # a parameter value longer than this (encoded) travels as a digest
_MODEL_MAX = 100  # characters of the model name kept
_PARAMS_MAX = 1500  # a params field longer than this travels as one digest
_DIFFS_MAX = 4  # message changes named in a diff; the rest are counted

# Top-level members of the conversation, in order of precedence.
_HISTORY_KEYS = ("messages", "input", "contents")
_SYSTEM_KEYS = ("system", "instructions", "system_instruction", "systemInstruction")
_PROMPT_KEYS = ("prompt", "text", "input_ids")
# One parameter, many spellings: the view's name, then the request members in order of precedence.
_ALIASES = {
    "max_tokens": ("max_completion_tokens", "max_tokens", "max_output_tokens", "max_new_tokens"),
    "stop": ("stop", "stop_sequences"),
}
# Members that shape what is generated, besides the conversation and the tools: sampling
# parameters, output constraints and server-side context of the OpenAI, Anthropic, Responses,
# vLLM, SGLang and Gemini APIs. Members not named here (stream, stream_options, user, metadata,
# logprobs, store, service_tier, session ids ...) do not reach the model.
_PARAMS = (
    "temperature", "top_p", "top_k", "min_p", "typical_p", "seed", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "length_penalty", "n", "best_of", "logit_bias", "ignore_eos", "min_tokens",
    "stop_token_ids", "include_stop_str_in_output", "skip_special_tokens", "tool_choice", "function_call",
    "functions", "response_format", "text", "parallel_tool_calls", "reasoning_effort", "reasoning", "thinking",
    "verbosity", "chat_template", "chat_template_kwargs", "add_generation_prompt", "continue_final_message",
    "guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs", "json_schema",
    "regex", "ebnf", "echo", "suffix", "previous_response_id", "truncation", "web_search_options",
    "lora_path", "image_data", "audio_data", "video_data", "generationConfig", "generation_config",
)  # fmt: skip
_ALIASED = {name: view for view, names in _ALIASES.items() for name in names}
# Members that never reach the model, left out of the view of a body of no known shape too.
_UNSEEN = ("model", "stream", "stream_options", "proxycheck")

# A message's role (or a Responses item's type) in the header: one letter. Other roles are
# "other"; "" is a message with neither (a bare string in an `input` list).
_ROLE_CODES = {
    "system": "s", "developer": "d", "user": "u", "assistant": "a", "tool": "t", "function": "f",
    "function_call": "c", "function_call_output": "o", "reasoning": "r", "message": "m", "model": "g",
    "other": "x", "": "-",
}  # fmt: skip
_ROLES = {code: role for role, code in _ROLE_CODES.items()}


# --------------------------------------------------------------------------------------------
# Canonical JSON


def canonical_json(doc: Any) -> bytes:
    """`doc` serialized one way: sorted keys, no spaces, UTF-8 (no \\u escapes), integral
    numbers without a fraction. RecursionError for nesting deeper than the interpreter allows."""
    text = json.dumps(_numbers(doc), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate escape is still one string


def _numbers(doc: Any) -> Any:
    if isinstance(doc, float):
        # 1.0 is 1: a number is its value, however it was spelled (exact below 2^53).
        if doc.is_integer() and abs(doc) <= 2**53:
            return int(doc)
        return doc
    if isinstance(doc, dict):
        return {k: _numbers(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_numbers(v) for v in doc]
    return doc


def parse(body: bytes) -> tuple[bool, Any]:
    """(True, the parsed document) when `body` is JSON, else (False, None)."""
    try:
        return True, json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False, None


def canonical_sha256(body: bytes) -> str | None:
    """The SHA-256 (hex) of the canonical JSON of `body`; None when it is not JSON."""
    ok, doc = parse(body)
    if not ok:
        return None
    try:
        return hashlib.sha256(canonical_json(doc)).hexdigest()
    except RecursionError:
        return None


# --------------------------------------------------------------------------------------------
# Parts


@dataclass(frozen=True, slots=True)
class Blob:
    """One part, or one run of messages: a short digest of its canonical JSON and its size."""

    digest: str
    size: int
    role: str = ""  # a message's role (or item type); "" when unknown, and for other parts
    count: int = 1  # the messages a run stands for


@dataclass(frozen=True, slots=True)
class Parts:
    """What the model sees in one request body, part by part.

    `view` is the SHA-256 (hex; 16 digits when decoded from a header) of the whole view;
    `messages` None when the body has no message list; `run` 1 when `messages` has one blob per
    message, k > 1 when its blobs are runs of about k messages (`runs`); `params` are (name,
    canonical JSON value, or "#" + digest when long) sorted by name, or one ("*", "#digest") when
    there were too many for the header. `shaped` False: the body is of no known shape, and the
    view is all of it but `_UNSEEN`.
    """

    view: str
    view_size: int
    messages: tuple[Blob, ...] | None = None
    message_count: int = 0
    run: int = 1
    system: Blob | None = None
    prompt: Blob | None = None
    tools: Blob | None = None
    params: tuple[tuple[str, str], ...] = ()
    model: str | None = None
    shaped: bool = True

    @property
    def seed(self) -> int:
        """64 bits of the view's digest: what seeds the reference engine's answer."""
        return int(self.view[:16], 16)


def parts_of(doc: Any) -> Parts:
    """The parts of a parsed request body (see the module doc). RecursionError for nesting
    deeper than the interpreter allows."""
    if not isinstance(doc, dict):
        return _unshaped(doc, None)
    model = doc.get("model")
    model = model[:_MODEL_MAX] if isinstance(model, str) else None
    history_key = next((k for k in _HISTORY_KEYS if _is_history(k, doc.get(k))), None)
    system_key = next((k for k in _SYSTEM_KEYS if doc.get(k) is not None), None)
    prompt_key = next((k for k in _PROMPT_KEYS if _is_prompt(k, doc.get(k))), None)
    if history_key is None and system_key is None and prompt_key is None:
        return _unshaped({k: v for k, v in doc.items() if k not in _UNSEEN}, model)

    messages = None
    if history_key is not None:
        items = doc[history_key]
        if isinstance(items, str):  # a Responses input string is one user message
            items = [{"role": "user", "content": items}]
        messages = tuple(_blob(_message(m), _role(m)) for m in items)
    system = _blob(_content(doc[system_key])) if system_key is not None else None
    prompt = _blob(doc[prompt_key]) if prompt_key is not None else None
    tools_doc = doc.get("tools")
    tools = None
    if tools_doc is not None:
        listed = [_tool(t) for t in tools_doc] if isinstance(tools_doc, list) else tools_doc
        tools = _with_count(_blob(listed), len(tools_doc) if isinstance(tools_doc, list) else 1)
    params = _params(doc)
    view = hashlib.sha256()
    for name, part in (("system", system), ("prompt", prompt), ("tools", tools)):
        if part is not None:
            view.update(f"{name}={part.digest};".encode())
    if messages is not None:
        view.update(("messages=" + ",".join(m.digest for m in messages) + ";").encode())
    for name, value in params:
        view.update(f"{name}={value};".encode("utf-8", "surrogatepass"))
    size = sum(p.size for p in (system, prompt, tools) if p is not None) + sum(m.size for m in messages or ())
    size += sum(len(v) for _, v in params)
    return Parts(
        view=view.hexdigest(),
        view_size=size,
        messages=_short(messages),
        message_count=len(messages or ()),
        system=_short1(system),
        prompt=_short1(prompt),
        tools=_short1(tools),
        params=tuple((name, _param_text(value)) for name, value in params),
        model=model,
    )


def _unshaped(doc: Any, model: str | None) -> Parts:
    data = canonical_json(doc)
    return Parts(view=hashlib.sha256(data).hexdigest(), view_size=len(data), model=model, shaped=False)


def _is_history(key: str, value: Any) -> bool:
    return isinstance(value, list) or (key == "input" and isinstance(value, str))


def _is_prompt(key: str, value: Any) -> bool:
    if key == "text":  # SGLang's prompt; a Responses `text` is an object (the output format)
        return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    return value is not None


def _blob(doc: Any, role: str = "") -> Blob:
    """A part with its full digest (shortened once the view digest is made)."""
    data = canonical_json(doc)
    return Blob(hashlib.sha256(data).hexdigest(), len(data), role)


def _with_count(blob: Blob, count: int) -> Blob:
    return Blob(blob.digest, blob.size, blob.role, count)


def _short1(blob: Blob | None) -> Blob | None:
    return None if blob is None else Blob(blob.digest[:_SHORT], blob.size, blob.role, blob.count)


def _short(blobs: tuple[Blob, ...] | None) -> tuple[Blob, ...] | None:
    return None if blobs is None else tuple(Blob(b.digest[:_SHORT], b.size, b.role, b.count) for b in blobs)


def _role(message: Any) -> str:
    if isinstance(message, dict):
        for key in ("role", "type"):
            if isinstance(message.get(key), str):
                return message[key] if message[key] in _ROLE_CODES else "other"
    return ""


def _message(message: Any) -> Any:
    """A message as the model sees it: null members dropped, one text part as its string."""
    if not isinstance(message, dict):
        return message
    out = {k: v for k, v in message.items() if v is not None}
    if "content" in out:
        out["content"] = _content(out["content"])
    return out


def _content(content: Any) -> Any:
    if (
        isinstance(content, list)
        and len(content) == 1
        and isinstance(content[0], dict)
        and set(content[0]) == {"type", "text"}
        and content[0]["type"] == "text"
        and isinstance(content[0]["text"], str)
    ):
        return content[0]["text"]
    return content


def _tool(tool: Any) -> Any:
    if not isinstance(tool, dict):
        return tool
    out = {k: v for k, v in tool.items() if v is not None}
    if isinstance(out.get("function"), dict):
        out["function"] = {k: v for k, v in out["function"].items() if v is not None}
    return out


def _params(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(view name, canonical JSON of the normalized value) of the parameters given, by name."""
    given: dict[str, Any] = {}
    sampling = doc.get("sampling_params")
    sources: list[Mapping[str, Any]] = [doc]
    if isinstance(sampling, dict):
        sources.append(sampling)  # SGLang: every sampling parameter shapes the answer
    elif sampling is not None:
        given["sampling_params"] = sampling
    for source in sources:
        every = source is not doc
        for view_name, names in _ALIASES.items():
            value = next((source[n] for n in names if source.get(n) is not None), None)
            if value is not None:
                given[view_name] = value
        for name, value in source.items():
            if value is None or name in _ALIASED:
                continue
            if name in _PARAMS and not (name == "text" and _is_prompt("text", value)):
                given[name] = value
            elif every:
                given[name] = value
    if isinstance(given.get("stop"), str):
        given["stop"] = [given["stop"]]
    return sorted((name, canonical_json(value).decode("utf-8", "surrogatepass")) for name, value in given.items())


def _q(text: str) -> str:
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def _unq(text: str) -> str:
    return unquote(text, errors="surrogatepass")


def _param_text(value: str) -> str:
    if len(_q(value)) <= _VALUE_MAX:
        return value
    return "#" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:_SHORT]


# --------------------------------------------------------------------------------------------
# Runs of messages (a history too long for one digest per message in a header)


def runs(messages: Sequence[Blob], k: int) -> tuple[Blob, ...]:
    """`messages` cut into runs of about `k`. A run ends after a message whose digest is 0
    modulo k, or at 4k messages: the cuts depend on the messages, not on their positions, so
    dropping or adding messages changes only the runs around the change and the rest still line
    up (content-defined chunking, as rsync's)."""
    if k <= 1:
        return tuple(messages)
    out: list[Blob] = []
    current: list[Blob] = []
    for message in messages:
        current.append(message)
        if int(message.digest, 16) % k == 0 or len(current) >= 4 * k:
            out.append(_run(current))
            current = []
    if current:
        out.append(_run(current))
    return tuple(out)


def _run(members: list[Blob]) -> Blob:
    digest = hashlib.sha256(",".join(m.digest for m in members).encode()).hexdigest()[:_SHORT]
    return Blob(digest, sum(m.size for m in members), "", sum(m.count for m in members))


# --------------------------------------------------------------------------------------------
# The header


def encode_parts(parts: Parts, limit: int = HEADER_LIMIT) -> str:
    """The parts as a header value of at most `limit` characters (ASCII):
    `1;v=VIEW.SIZE;m=MODEL;s=D.SIZE;p=D.SIZE;t=COUNT.D.SIZE;o=NAME:VALUE,...;n=COUNT[/K]:ITEMS`,
    values percent-encoded; ITEMS are `<role code><digest>.<size>` per message, or
    `<count>.<digest>.<size>` per run of about K messages when one per message does not fit."""
    fields = [FORMAT, f"v={parts.view[:_VIEW_SHORT]}.{parts.view_size}"]
    if not parts.shaped:
        fields.append("u")
    if parts.model is not None:
        fields.append("m=" + _q(parts.model))
    for key, blob in (("s", parts.system), ("p", parts.prompt)):
        if blob is not None:
            fields.append(f"{key}={blob.digest}.{blob.size}")
    if parts.tools is not None:
        fields.append(f"t={parts.tools.count}.{parts.tools.digest}.{parts.tools.size}")
    if parts.params:
        listed = ",".join(f"{name}:{_q(value)}" for name, value in parts.params)
        if len(listed) > _PARAMS_MAX:
            whole = ";".join(f"{n}={v}" for n, v in parts.params).encode("utf-8", "surrogatepass")
            listed = "*:" + _q("#" + hashlib.sha256(whole).hexdigest()[:_SHORT])
        fields.append("o=" + listed)
    head = ";".join(fields)
    if parts.messages is None:
        return head
    room = limit - len(head) - 1
    if parts.run != 1:  # already runs (parts decoded from a header): as they are
        candidates = [(parts.run, parts.messages)]
    else:
        candidates = []
        k = 1
        while True:
            blobs = runs(parts.messages, k)
            candidates.append((k, blobs))
            if len(blobs) <= 1:
                break
            k *= 2
    for k, blobs in candidates:
        text = _messages_text(parts.message_count, k, blobs)
        if len(text) <= room:
            return head + ";" + text
    # Unreachable with the bounds above (one run is a few characters), but well defined: the
    # count alone, "not listed".
    return head + f";n={parts.message_count}/0:"


def _messages_text(count: int, k: int, blobs: Sequence[Blob]) -> str:
    if k == 1:
        items = ",".join(f"{_ROLE_CODES.get(b.role, 'x')}{b.digest}.{b.size}" for b in blobs)
        return f"n={count}:{items}"
    items = ",".join(f"{b.count}.{b.digest}.{b.size}" for b in blobs)
    return f"n={count}/{k}:{items}"


class PartsError(ValueError):
    """A parts header that cannot be read."""


def decode_parts(value: str) -> Parts:
    """The parts a header value describes (PartsError when it is not one)."""
    fields = value.strip().split(";")
    if not fields or fields[0] != FORMAT:
        raise PartsError(f"not a version {FORMAT} parts header: {value[:40]!r}")
    got: dict[str, Any] = {"shaped": True}
    try:
        for text in fields[1:]:
            key, _, rest = text.partition("=")
            if key == "v":
                digest, size = rest.split(".")
                if len(digest) < _VIEW_SHORT:
                    raise PartsError(f"a view digest of {len(digest)} hex digits")
                got["view"], got["view_size"] = _hex(digest), int(size)
            elif key == "u":
                got["shaped"] = False
            elif key == "m":
                got["model"] = _unq(rest)
            elif key in ("s", "p"):
                digest, size = rest.split(".")
                got["system" if key == "s" else "prompt"] = Blob(_hex(digest), int(size))
            elif key == "t":
                count, digest, size = rest.split(".")
                got["tools"] = Blob(_hex(digest), int(size), "", int(count))
            elif key == "o":
                got["params"] = tuple(_param(item) for item in rest.split(",") if item)
            elif key == "n":
                got.update(_messages(rest))
            else:
                raise PartsError(f"unknown field {key!r}")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise PartsError(f"unreadable parts header ({exc}): {value[:40]!r}") from exc
    if "view" not in got:
        raise PartsError(f"a parts header without the view digest: {value[:40]!r}")
    return Parts(**got)


def _hex(text: str) -> str:
    int(text, 16)  # ValueError when it is not hex
    return text.lower()


def _param(item: str) -> tuple[str, str]:
    name, sep, value = item.partition(":")
    if not sep or not name:
        raise PartsError(f"bad parameter {item!r}")
    return name, _unq(value)


def _messages(text: str) -> dict[str, Any]:
    head, _, items = text.partition(":")
    count, _, k = head.partition("/")
    run = int(k) if k else 1
    blobs = []
    for item in items.split(",") if items else ():
        if run == 1:
            digest, size = item[1:].split(".")
            blobs.append(Blob(_hex(digest), int(size), _ROLES[item[0]]))
        else:
            n, digest, size = item.split(".")
            blobs.append(Blob(_hex(digest), int(size), "", int(n)))
    return {"messages": tuple(blobs), "message_count": int(count), "run": run}


# --------------------------------------------------------------------------------------------
# Comparing what was sent with what the engine received


@dataclass(frozen=True, slots=True)
class Change:
    """What a hop changed in a request. `mutated`: what the model sees differs; `what` says how
    (each a short phrase); `notes` are differences that are not a failure (the model name)."""

    mutated: bool
    what: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def same_view(a: Parts, b: Parts) -> bool:
    n = min(len(a.view), len(b.view))
    return n >= _VIEW_SHORT and a.view[:n] == b.view[:n]


def compare(sent: Parts, received: Parts) -> Change:
    """How `received` (as the engine got it) differs from `sent` (as the client sent it)."""
    notes = ()
    if sent.model != received.model and sent.model is not None and received.model is not None:
        notes = (f"model {_quoted(sent.model)} -> {_quoted(received.model)} (a gateway's alias, not a failure)",)
    elif sent.model != received.model:
        notes = (f"model {_quoted(sent.model)} -> {_quoted(received.model)}",)
    if same_view(sent, received):
        return Change(False, (), notes)
    what: list[str] = []
    if not sent.shaped or not received.shaped:
        what.append(f"the request changed ({_size(sent.view_size)} -> {_size(received.view_size)} of content)")
        return Change(True, tuple(what), notes)
    what += _blob_change("system prompt", sent.system, received.system)
    what += _blob_change("prompt", sent.prompt, received.prompt)
    what += _message_changes(sent, received)
    what += _tools_change(sent.tools, received.tools)
    what += _param_changes(sent.params, received.params)
    if not what:
        what.append("what the model sees differs, though no single part can be named")
    return Change(True, tuple(what), notes)


def _quoted(text: str | None) -> str:
    return "absent" if text is None else json.dumps(text, ensure_ascii=False)


def _blob_change(name: str, a: Blob | None, b: Blob | None) -> list[str]:
    if a is None and b is None:
        return []
    if a is None:
        assert b is not None
        return [f"{name} added ({_size(b.size)})"]
    if b is None:
        return [f"{name} dropped ({_size(a.size)})"]
    if a.digest[:_SHORT] == b.digest[:_SHORT]:
        return []
    return [f"{name} changed ({_size(a.size)} -> {_size(b.size)})"]


def _tools_change(a: Blob | None, b: Blob | None) -> list[str]:
    count_a, count_b = (a.count if a else 0), (b.count if b else 0)
    if count_a != count_b:
        return [f"tools {count_a} -> {count_b}"]
    if a is not None and b is not None and a.digest[:_SHORT] != b.digest[:_SHORT]:
        return [f"tools changed ({count_a}, {_size(a.size)} -> {_size(b.size)})"]
    return []


def _param_changes(a: Iterable[tuple[str, str]], b: Iterable[tuple[str, str]]) -> list[str]:
    mine, theirs = dict(a), dict(b)
    if "*" in mine or "*" in theirs:  # too many to list: one digest of them all
        return [] if mine == theirs else ["sampling parameters changed"]
    out = []
    for name in sorted(set(mine) | set(theirs)):
        x, y = mine.get(name), theirs.get(name)
        if x == y:
            continue
        if (x or "").startswith("#") or (y or "").startswith("#"):
            if x is not None and y is not None:
                out.append(f"{name} changed")
                continue
        out.append(f"{name} {_value(x)} -> {_value(y)}")
    return out


def _value(v: str | None) -> str:
    if v is None:
        return "absent"
    return "(long value)" if v.startswith("#") else v


def _message_changes(sent: Parts, received: Parts) -> list[str]:
    a, b = sent.messages, received.messages
    if a is None and b is None:
        return []
    if a is None or b is None:
        return [f"messages {'absent' if a is None else sent.message_count} -> "
                f"{'absent' if b is None else received.message_count}"]  # fmt: skip
    if sent.run == 0 or received.run == 0:  # a list the header had no room for: the count alone
        same = sent.message_count == received.message_count
        return [] if same else [f"messages {sent.message_count} -> {received.message_count}"]
    if received.run != 1 and sent.run == 1:
        a = runs(a, received.run)
    elif sent.run != 1 and received.run == 1:
        b = runs(b, sent.run)
    elif sent.run != received.run:
        return [f"messages {sent.message_count} -> {received.message_count} (not comparable: runs of "
                f"{sent.run} and {received.run})"]  # fmt: skip
    run = max(sent.run, received.run)
    ops = [op for op in SequenceMatcher(None, [x.digest for x in a], [y.digest for y in b], autojunk=False)
           .get_opcodes() if op[0] != "equal"]  # fmt: skip
    if not ops:
        return []
    phrases = (_run_phrases(a, b, ops) if run > 1 else _message_phrases(a, b, ops))
    if len(phrases) > _DIFFS_MAX:
        phrases = phrases[:_DIFFS_MAX] + [f"{len(phrases) - _DIFFS_MAX} more change(s)"]
    text = ", ".join(phrases)
    if run > 1:
        text += f", compared in runs of about {run} messages (too many to list one by one)"
    if sent.message_count != received.message_count:
        return [f"messages {sent.message_count} -> {received.message_count}: {text}"]
    return [text]


def _message_phrases(a: Sequence[Blob], b: Sequence[Blob], ops: list[tuple[str, int, int, int, int]]) -> list[str]:
    out: list[str] = []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "delete":
            out.append(_dropped(i1, i2, len(a)))
        elif tag == "insert":
            out.append(_added(i1, j2 - j1, len(a), b[j1] if j2 - j1 == 1 else None))
        elif i2 - i1 == j2 - j1:
            out += [_changed(i + 1, a[i], b[j1 + (i - i1)]) for i in range(i1, i2)]
        else:
            out.append(f"{_span(i1, i2)} ({i2 - i1}) replaced by {j2 - j1} other(s)")
    return out


def _run_phrases(a: Sequence[Blob], b: Sequence[Blob], ops: list[tuple[str, int, int, int, int]]) -> list[str]:
    """The changes between two run lists, in message numbers (runs stand for their messages)."""
    starts_a = _starts(a)
    starts_b = _starts(b)
    total = starts_a[-1]
    out: list[str] = []
    for tag, i1, i2, j1, j2 in ops:
        m1, m2 = starts_a[i1], starts_a[i2]
        n = starts_b[j2] - starts_b[j1]
        if tag == "delete":
            out.append(_dropped(m1, m2, total))
        elif tag == "insert":
            out.append(_added(m1, n, total, None))
        else:
            out.append(f"{_span(m1, m2)} changed ({m2 - m1} -> {n} messages)" if n != m2 - m1
                       else f"{_span(m1, m2)} changed")
    return out


def _starts(blobs: Sequence[Blob]) -> list[int]:
    out = [0]
    for blob in blobs:
        out.append(out[-1] + blob.count)
    return out


def _span(i1: int, i2: int) -> str:
    """Messages i1..i2-1 (0-based, half open) in 1-based words."""
    return f"message {i1 + 1}" if i2 - i1 == 1 else f"messages {i1 + 1}-{i2}"


def _dropped(i1: int, i2: int, total: int) -> str:
    n = i2 - i1
    if i1 == 0 and i2 < total:
        return f"the first {n} dropped"
    if i2 == total and i1 > 0:
        return f"the last {n} dropped"
    if i1 == 0:
        return f"all {n} dropped"
    return f"{_span(i1, i2)} dropped"


def _added(at: int, n: int, total: int, one: Blob | None) -> str:
    what = f"1 ({one.role or 'message'}, {_size(one.size)})" if one is not None else str(n)
    if at == 0:
        return f"{what} added at the start"
    if at == total:
        return f"{what} added at the end"
    return f"{what} added after message {at}"


def _changed(number: int, a: Blob, b: Blob) -> str:
    role = a.role if a.role == b.role else f"{a.role or '?'} -> {b.role or '?'}"
    role = f"{role}, " if role else ""
    return f"message {number} changed ({role}{_size(a.size)} -> {_size(b.size)})"


def _size(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f} MB"
    return f"{n / 1000:.1f} KB" if n >= 1000 else f"{n} B"


# --------------------------------------------------------------------------------------------
# The client's decision


@dataclass(frozen=True, slots=True)
class Judgement:
    """What the engine's headers say about a request: `mutated`, the detail for the outcome
    (what changed), and a note to keep even when nothing that counts changed."""

    mutated: bool
    detail: str = ""
    note: str = ""


def judge(
    sent: bytes,
    *,
    raw_sha256: str,
    raw_bytes: str | None,
    canonical: str | None,
    parts: str | None,
) -> Judgement:
    """Whether a hop changed what the model sees in `sent`, from what the engine reports having
    received: its parts header, else the digest of its canonical JSON, else its raw digest (an
    older engine, or a body that is not JSON: any other bytes count)."""
    if raw_sha256 == hashlib.sha256(sent).hexdigest():
        return Judgement(False)
    got = raw_bytes or "?"
    received = f"the engine received {got} bytes; {len(sent)} were sent"
    ok, doc = parse(sent)
    problem = ""
    if ok and parts is not None:
        try:
            change = compare(parts_of(doc), decode_parts(parts))
        except PartsError as exc:
            problem = f"; its {PARTS_HEADER} header is unreadable: {exc}"
        except RecursionError:
            ok = False
        else:
            note = "; ".join(change.notes)
            if not change.mutated:
                return Judgement(False, note=note)
            detail = f"what the model sees changed: {'; '.join(change.what)} ({received})"
            return Judgement(True, detail + (f"; {note}" if note else ""), note)
    if ok and canonical is not None:
        mine = canonical_sha256(sent)
        if mine == canonical.lower():
            return Judgement(False)
        if mine is not None:
            return Judgement(True, f"the engine received other JSON ({received}){problem}")
    return Judgement(True, f"the engine received {got} bytes with another digest; {len(sent)} were sent{problem}")
