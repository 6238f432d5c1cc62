"""API dialects: streamed events (or one JSON body) in, one normalized `Result` out.

This package owns the knowledge of what each LLM API puts on the wire, and nothing else:

* `detect` names the dialect of a request from its URL path, its JSON body and its headers;
* an `Accumulator` (one per response, from `accumulator(dialect)`) is fed the SSE events of a
  streamed response one by one, says what each event meant (`EventKind`) and assembles the
  text, reasoning, tool calls, usage, finish reasons, errors and terminal marker into a
  `proxycheck.core.protocol.result.Result`;
* `parse_body` does the same for a non-streamed JSON body.

Dialects (their names are part of the recording format):

``openai_chat``         ``/v1/chat/completions`` (OpenAI, vLLM, SGLang, llama.cpp, gateways)
``openai_completions``  ``/v1/completions`` (legacy text completions)
``openai_responses``    ``/v1/responses`` (OpenAI Responses API; no ``[DONE]``)
``anthropic_messages``  ``/v1/messages`` (Anthropic Messages)
``sglang_generate``     SGLang's native ``/generate`` (cumulative ``text`` per event)

Pure core: standard library only, no I/O, no clock. Framing the byte stream into events is the
SSE parser's job; an accumulator only ever sees ``(event_type, data)`` pairs.

Modules: ``base`` (the `Accumulator` base class and shared helpers), ``detect`` (`detect`,
`is_streaming_request`), one module per dialect (``openai_chat``, ``openai_completions`` with
their shared ``openai_common``, ``openai_responses``, ``anthropic_messages``,
``sglang_generate``); this ``__init__`` holds the registry and the public functions.

Rules shared by every dialect:

* ``feed`` never raises. Bad JSON, or JSON of a shape the dialect does not expect, is counted in
  `Result.malformed` (the first few described in `malformed_details`) and returns MALFORMED. An
  event that turns out malformed half-way may already have contributed what was read before the
  bad part.
* A well-formed event of a type the dialect does not know (Anthropic and the Responses API both
  announce that they add event types) is META, not MALFORMED.
* Events after the terminal marker are parsed normally (some gateways send trailing usage);
  `terminal` stays True.
* Errors the server reports inside a response go to `Result.errors`; an error repeated verbatim
  (the Responses API sends an ``error`` event and then the same error in ``response.failed``) is
  recorded once.
* Text and reasoning are kept as lists of pieces and joined only in ``result()``, so feeding
  costs about one ``json.loads`` per event and ``result()`` is linear in the text.
"""

from __future__ import annotations

from collections.abc import Iterable

from proxycheck.core.protocol.dialects.anthropic_messages import _AnthropicMessages
from proxycheck.core.protocol.dialects.base import Accumulator, _loads
from proxycheck.core.protocol.dialects.detect import detect, is_streaming_request
from proxycheck.core.protocol.dialects.openai_chat import _OpenAIChat
from proxycheck.core.protocol.dialects.openai_completions import _OpenAICompletions
from proxycheck.core.protocol.dialects.openai_responses import _OpenAIResponses
from proxycheck.core.protocol.dialects.sglang_generate import _SGLangGenerate
from proxycheck.core.protocol.result import Result

__all__ = [
    "DIALECTS",
    "Accumulator",
    "accumulator",
    "detect",
    "is_streaming_request",
    "parse_body",
    "parse_events",
]

DIALECTS: tuple[str, ...] = (
    "openai_chat",
    "openai_completions",
    "openai_responses",
    "anthropic_messages",
    "sglang_generate",
)

_CLASSES: dict[str, type[Accumulator]] = {
    cls.dialect: cls
    for cls in (
        _OpenAIChat,
        _OpenAICompletions,
        _OpenAIResponses,
        _AnthropicMessages,
        _SGLangGenerate,
    )
}


def accumulator(dialect: str) -> Accumulator:
    """A fresh accumulator for one response; ValueError for an unknown dialect name."""
    try:
        return _CLASSES[dialect]()
    except KeyError:
        raise ValueError(f"unknown dialect {dialect!r} (known: {', '.join(DIALECTS)})") from None


def parse_events(dialect: str, events: Iterable[tuple[str, str]]) -> Result:
    """Feed all (event_type, data) pairs to a fresh accumulator and return its Result."""
    acc = accumulator(dialect)
    feed = acc.feed
    for event_type, data in events:
        feed(event_type, data)
    return acc.result()


def parse_body(dialect: str, body: bytes | str) -> Result:
    """The Result of a non-streamed response body.

    `terminal` is True iff the body is a complete JSON document of the dialect's response shape.
    An error body (`{"error": ...}`, Anthropic `{"type": "error"}`) puts its error in `errors`
    and is not terminal, as no response was produced. A body that is not JSON, or JSON of
    another shape, gives `malformed=1`. `content_events` is 1 when the body carried content."""
    acc = accumulator(dialect)
    text = body
    try:
        if isinstance(body, (bytes, bytearray, memoryview)):
            text = bytes(body).decode("utf-8")
        acc._load_body(_loads(text))
    except UnicodeDecodeError as exc:
        acc._bad(f"body is not UTF-8 ({exc.reason} at byte {exc.start})", repr(body))
    except Exception as exc:
        acc._bad(exc, text if isinstance(text, str) else repr(text))
    return acc.result()
