"""Dialect detection: `detect` names a request's dialect from its URL path, JSON body and
headers; `is_streaming_request` says whether the body asks for a streamed response."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_loads = json.loads


def is_streaming_request(body: object | None) -> bool:
    """True when the request body asks for a streamed response (`"stream": true`, SGLang too)."""
    body = _json_body(body)
    return type(body) is dict and body.get("stream") is True


# Path endings, longest first so '/chat/completions' wins over '/completions'.
_PATH_ENDINGS: tuple[tuple[str, str], ...] = (
    ("/chat/completions", "openai_chat"),
    ("/completions", "openai_completions"),
    ("/responses", "openai_responses"),
    ("/messages", "anthropic_messages"),
    ("/generate", "sglang_generate"),
)

# Last path segments of endpoints that are not generation: their bodies may look like one
# (count_tokens takes `messages`, embeddings take `input`), so body detection must not run.
_NOT_LLM = frozenset(
    {
        "count_tokens",
        "embeddings",
        "embed",
        "models",
        "tokenize",
        "detokenize",
        "health",
        "metrics",
        "moderations",
        "rerank",
        "score",
        "classify",
        "batches",
        "files",
        "encode",
        "speech",
        "transcriptions",
        "translations",
        "generations",
        "edits",
        "variations",
        "get_model_info",
        "get_server_info",
        "flush_cache",
        "version",
    }
)

_SGLANG_INPUTS = ("text", "input_ids", "input_embeds", "sampling_params")


def detect(
    path: str, body: object | None = None, headers: Mapping[str, str] | None = None
) -> str | None:
    """Dialect of a request from its URL path (query ignored, any prefix such as /openai/v1 or
    /api allowed: the path's end decides), then, when the path says nothing (e.g. Cloudflare's
    /ai/run/@cf/...), from the JSON body's keys and the `anthropic-version` header. None when
    it is not an LLM generation request."""
    clean = path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    if "://" in clean:  # an absolute URL (forward-proxy request line): keep only its path
        clean = "/" + clean.split("://", 1)[1].partition("/")[2]
    data = _json_body(body)
    obj = data if type(data) is dict else None
    lower = clean.lower()
    for ending, dialect in _PATH_ENDINGS:
        if lower.endswith(ending):
            if dialect == "anthropic_messages" and "/threads/" in lower:
                return None  # OpenAI Assistants: /v1/threads/{id}/messages
            if (
                dialect == "sglang_generate"
                and obj is not None
                and not any(k in obj for k in _SGLANG_INPUTS)
            ):
                return None  # another engine's /generate (Ollama's /api/generate takes `prompt`)
            return dialect
    if lower.rpartition("/")[2] in _NOT_LLM or obj is None:
        return None
    if "messages" in obj:
        if _anthropic_hint(obj, headers):
            return "anthropic_messages"
        return "openai_chat"
    if "input" in obj:
        return "openai_responses"
    if "prompt" in obj:
        return "openai_completions"
    if any(k in obj for k in _SGLANG_INPUTS):
        return "sglang_generate"
    return None


def _anthropic_hint(body: Mapping[str, Any], headers: Mapping[str, str] | None) -> bool:
    # Bedrock and Vertex carry the version in the body; a top-level `system` or
    # `stop_sequences` exists only in Anthropic's request shape.
    if any(k in body for k in ("anthropic_version", "system", "stop_sequences")):
        return True
    if headers:
        return any(k.lower() == "anthropic-version" for k in headers)
    return False


def _json_body(body: object | None) -> object | None:
    """A parsed body as given, or bytes/str parsed leniently (None when not JSON)."""
    if isinstance(body, (bytes, bytearray, str)):
        try:
            return _loads(body)
        except (ValueError, RecursionError):
            return None
    return body
