"""The reference engine's wire format: a `Plan` as the bytes SGLang and vLLM would send.

Each encoder turns a plan into `Wire`: the streamed events, each with the generation step at
which it is sent (step 0 is the first token, at TTFT; the events before it, such as the role
chunk or `message_start`, go with it; closing events go with the last token), and the body of the
non-streamed answer. Shapes follow vLLM's OpenAI server (chunk objects, `usage` on a final
`choices: []` chunk when `stream_options.include_usage`, `finish_reason` on its own chunk,
`data: [DONE]`), Anthropic's Messages API and SGLang's native `/generate`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from proxycheck.core.protocol import requestparts
from proxycheck.core.protocol.requestparts import Parts
from proxycheck.core.testbed.synth import Plan

# Headers of every reference-engine response about the request it received
# (`proxycheck.core.protocol.requestparts` defines them).
SHA_HEADER = requestparts.SHA_HEADER
BYTES_HEADER = requestparts.BYTES_HEADER
CANONICAL_HEADER = requestparts.CANONICAL_HEADER
PARTS_HEADER = requestparts.PARTS_HEADER


def received_headers(body: bytes, doc: Any = None, is_json: bool | None = None) -> tuple[dict[str, str], Parts | None]:
    """The headers that describe a request body as the engine received it, and its parts (None
    when it is not JSON). `doc` is the body already parsed, when `is_json` says it was."""
    headers = {SHA_HEADER: hashlib.sha256(body).hexdigest(), BYTES_HEADER: str(len(body))}
    if is_json is None:
        is_json, doc = requestparts.parse(body)
    if not is_json:
        return headers, None
    try:
        canonical = hashlib.sha256(requestparts.canonical_json(doc)).hexdigest()
        parts = requestparts.parts_of(doc)
    except RecursionError:  # nested deeper than the interpreter allows: the raw digest only
        return headers, None
    headers[CANONICAL_HEADER] = canonical
    headers[PARTS_HEADER] = requestparts.encode_parts(parts)
    return headers, parts


@dataclass(frozen=True, slots=True)
class Wire:
    events: tuple[tuple[int, bytes], ...]
    body: bytes

    @property
    def steps(self) -> int:
        return self.events[-1][0] + 1 if self.events else 0


@dataclass(frozen=True, slots=True)
class Meta:
    """Per-response facts that are not part of the plan."""

    model: str
    created: int
    include_usage: bool = False


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def _data(doc: Any) -> bytes:
    return b"data: " + _dumps(doc) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def _usage(plan: Plan) -> dict[str, int]:
    return {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": plan.completion_tokens,
        "total_tokens": plan.prompt_tokens + plan.completion_tokens,
    }


def _last_step(plan: Plan) -> int:
    return max(plan.completion_tokens - 1, 0)


# ------------------------------------------------------------------------------------ OpenAI


def openai_chat(plan: Plan, meta: Meta) -> Wire:
    rid = f"chatcmpl-{plan.seed & 0xFFFFFFFFFFFFFFFF:016x}"
    head = {"id": rid, "object": "chat.completion.chunk", "created": meta.created, "model": meta.model}
    if meta.include_usage:
        head["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _data({**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    events: list[tuple[int, bytes]] = []
    if plan.tool_calls:
        events.append((0, chunk({"role": "assistant", "content": None})))
        step = 0
        for index, call in enumerate(plan.tool_calls):
            first = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
            events.append((step, chunk({"tool_calls": [first]})))
            for frag in call.fragments:
                events.append((step, chunk({"tool_calls": [{"index": index, "function": {"arguments": frag}}]})))
                step += 1
    else:
        events.append((0, chunk({"role": "assistant", "content": ""})))
        events.extend((i, chunk({"content": tok})) for i, tok in enumerate(plan.tokens))
    last = _last_step(plan)
    events.append((last, chunk({}, plan.finish_reason)))
    if meta.include_usage:
        events.append((last, _data({**head, "choices": [], "usage": _usage(plan)})))
    events.append((last, DONE))

    message: dict[str, Any] = {"role": "assistant", "content": None if plan.tool_calls else plan.text}
    if plan.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in plan.tool_calls
        ]
    body = {
        "id": rid,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": plan.finish_reason}],
        "usage": _usage(plan),
    }
    return Wire(tuple(events), _dumps(body))


def openai_completions(plan: Plan, meta: Meta) -> Wire:
    rid = f"cmpl-{plan.seed & 0xFFFFFFFFFFFFFFFF:016x}"
    head = {"id": rid, "object": "text_completion", "created": meta.created, "model": meta.model}
    last = len(plan.tokens) - 1
    events = [
        (i, _data({**head, "choices": [{"index": 0, "text": tok, "logprobs": None,
                                         "finish_reason": plan.finish_reason if i == last else None}]}))
        for i, tok in enumerate(plan.tokens)
    ]
    if meta.include_usage:
        events.append((last, _data({**head, "choices": [], "usage": _usage(plan)})))
    events.append((last, DONE))
    body = {**head, "choices": [{"index": 0, "text": plan.text, "logprobs": None, "finish_reason": plan.finish_reason}],
            "usage": _usage(plan)}
    return Wire(tuple(events), _dumps(body))


# --------------------------------------------------------------------------------- Anthropic


def _event(name: str, doc: Mapping[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + _dumps(doc) + b"\n\n"


def anthropic_messages(plan: Plan, meta: Meta) -> Wire:
    mid = f"msg_{plan.seed & 0xFFFFFFFFFFFFFFFF:016x}"
    start_usage = {"input_tokens": plan.prompt_tokens, "output_tokens": 1}
    message = {"id": mid, "type": "message", "role": "assistant", "model": meta.model, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": start_usage}
    events: list[tuple[int, bytes]] = [(0, _event("message_start", {"type": "message_start", "message": message}))]
    content: list[dict[str, Any]] = []
    if plan.tool_calls:
        step = 0
        for index, call in enumerate(plan.tool_calls):
            block = {"type": "tool_use", "id": call.id.replace("call_", "toolu_"), "name": call.name, "input": {}}
            events.append((step, _event("content_block_start", {"type": "content_block_start", "index": index,
                                                                 "content_block": block})))
            if index == 0:
                events.append((step, _event("ping", {"type": "ping"})))
            for frag in call.fragments:
                delta = {"type": "input_json_delta", "partial_json": frag}
                events.append((step, _event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                                     "delta": delta})))
                step += 1
            events.append((max(step - 1, 0), _event("content_block_stop", {"type": "content_block_stop", "index": index})))
            content.append({**block, "input": json.loads(call.arguments)})
    else:
        events.append((0, _event("content_block_start", {"type": "content_block_start", "index": 0,
                                                          "content_block": {"type": "text", "text": ""}})))
        events.append((0, _event("ping", {"type": "ping"})))
        for i, tok in enumerate(plan.tokens):
            delta = {"type": "text_delta", "text": tok}
            events.append((i, _event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})))
        events.append((_last_step(plan), _event("content_block_stop", {"type": "content_block_stop", "index": 0})))
        content.append({"type": "text", "text": plan.text})
    last = _last_step(plan)
    events.append((last, _event("message_delta", {"type": "message_delta",
                                                  "delta": {"stop_reason": plan.finish_reason, "stop_sequence": None},
                                                  "usage": {"output_tokens": plan.completion_tokens}})))
    events.append((last, _event("message_stop", {"type": "message_stop"})))
    body = {**message, "content": content, "stop_reason": plan.finish_reason,
            "usage": {"input_tokens": plan.prompt_tokens, "output_tokens": plan.completion_tokens}}
    return Wire(tuple(events), _dumps(body))


# ------------------------------------------------------------------------------------ SGLang


def sglang_generate(plan: Plan, meta: Meta) -> Wire:
    rid = f"{plan.seed & 0xFFFFFFFFFFFFFFFF:032x}"
    finish = {"type": "length", "length": len(plan.tokens)} if plan.finish_reason == "length" else {"type": "stop", "matched": 2}

    def doc(upto: int, final: bool) -> dict[str, Any]:
        return {
            "text": "".join(plan.tokens[:upto]),
            "meta_info": {"id": rid, "finish_reason": finish if final else None, "prompt_tokens": plan.prompt_tokens,
                          "completion_tokens": upto, "cached_tokens": 0},
            "index": 0,
        }

    n = len(plan.tokens)
    events = [(i, _data(doc(i + 1, i == n - 1))) for i in range(n)]
    events.append((max(n - 1, 0), DONE))
    return Wire(tuple(events), _dumps(doc(n, True)))


ENCODERS: dict[str, Callable[[Plan, Meta], Wire]] = {
    "openai_chat": openai_chat,
    "openai_completions": openai_completions,
    "anthropic_messages": anthropic_messages,
    "sglang_generate": sglang_generate,
}


def encode(dialect: str, plan: Plan, meta: Meta) -> Wire:
    return ENCODERS[dialect](plan, meta)
