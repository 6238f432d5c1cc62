"""The reference engine's wire format: a `Plan` as the bytes SGLang and vLLM would send.

Each encoder turns a plan into `Wire`: the streamed events, each with the generation step at
which it is sent (step 0 is the first token, at TTFT; the events before it, such as the role
chunk or `message_start`, go with it; closing events go with the last token), and the body of the
non-streamed answer. Shapes follow vLLM's OpenAI server (chunk objects, `usage` on a final
`choices: []` chunk when `stream_options.include_usage`, `finish_reason` on its own chunk,
`data: [DONE]`), Anthropic's Messages API, OpenAI's Responses API and SGLang's native `/generate`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from proxycheck.core.protocol import requestparts
from proxycheck.core.protocol.requestparts import Parts
from proxycheck.core.testbed.promptcache import NO_CACHE, CacheUse, fitted
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
    # The request body, for encoders whose answer echoes it (the Responses API's response object).
    request: Mapping[str, Any] | None = None
    # What an Anthropic request read from and wrote to the engine's prompt cache (its usage).
    prompt_cache: CacheUse = NO_CACHE


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


def _anthropic_usage(plan: Plan, meta: Meta, output_tokens: int) -> dict[str, Any]:
    """Usage as the Messages API reports it: input tokens apart from the prompt cache's reads and
    writes (`proxycheck.core.testbed.promptcache`; the three sum to the engine's input estimate)."""
    inputs, read, written_5m, written_1h = fitted(meta.prompt_cache, plan.prompt_tokens)
    return {"input_tokens": inputs, "cache_creation_input_tokens": written_5m + written_1h,
            "cache_read_input_tokens": read,
            "cache_creation": {"ephemeral_5m_input_tokens": written_5m, "ephemeral_1h_input_tokens": written_1h},
            "output_tokens": output_tokens}  # fmt: skip


def anthropic_messages(plan: Plan, meta: Meta) -> Wire:
    """Anthropic Messages: `event:` + `data:` pairs. With extended thinking (`plan.thinking`) the
    thinking block comes first, at index 0: `thinking_delta` events (none when the display is
    omitted), then one `signature_delta` before its `content_block_stop`; the text or tool_use
    blocks follow, their steps after the thinking's."""
    mid = f"msg_{plan.seed & 0xFFFFFFFFFFFFFFFF:016x}"
    start_usage = {**_anthropic_usage(plan, meta, 1), "service_tier": "standard"}
    message = {"id": mid, "type": "message", "role": "assistant", "model": meta.model, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": start_usage}
    events: list[tuple[int, bytes]] = [(0, _event("message_start", {"type": "message_start", "message": message}))]
    content: list[dict[str, Any]] = []

    def block_start(step: int, index: int, block: dict[str, Any]) -> None:
        events.append((step, _event("content_block_start", {"type": "content_block_start", "index": index,
                                                             "content_block": block})))
        if index == 0:
            events.append((step, _event("ping", {"type": "ping"})))

    def block_delta(step: int, index: int, delta: dict[str, Any]) -> None:
        events.append((step, _event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                             "delta": delta})))

    def block_stop(step: int, index: int) -> None:
        events.append((step, _event("content_block_stop", {"type": "content_block_stop", "index": index})))

    first = 0  # the content block index and generation step where the answer proper starts
    step0 = len(plan.thinking)
    if plan.thinking:
        block_start(0, 0, {"type": "thinking", "thinking": "", "signature": ""})
        if plan.thinking_shown:
            for i, tok in enumerate(plan.thinking):
                block_delta(i, 0, {"type": "thinking_delta", "thinking": tok})
        block_delta(step0 - 1, 0, {"type": "signature_delta", "signature": plan.signature})
        block_stop(step0 - 1, 0)
        content.append({"type": "thinking", "thinking": plan.thinking_text, "signature": plan.signature})
        first = 1
    if plan.tool_calls:
        step = step0
        for offset, call in enumerate(plan.tool_calls):
            index = first + offset
            block = {"type": "tool_use", "id": call.id.replace("call_", "toolu_"), "name": call.name, "input": {}}
            block_start(step, index, block)
            for frag in call.fragments:
                block_delta(step, index, {"type": "input_json_delta", "partial_json": frag})
                step += 1
            block_stop(max(step - 1, 0), index)
            content.append({**block, "input": json.loads(call.arguments)})
    else:
        block_start(step0, first, {"type": "text", "text": ""})
        for i, tok in enumerate(plan.tokens):
            block_delta(step0 + i, first, {"type": "text_delta", "text": tok})
        block_stop(_last_step(plan), first)
        content.append({"type": "text", "text": plan.text})
    last = _last_step(plan)
    usage = _anthropic_usage(plan, meta, plan.completion_tokens)
    events.append((last, _event("message_delta", {"type": "message_delta",
                                                  "delta": {"stop_reason": plan.finish_reason, "stop_sequence": None},
                                                  "usage": usage})))
    events.append((last, _event("message_stop", {"type": "message_stop"})))
    body = {**message, "content": content, "stop_reason": plan.finish_reason,
            "usage": {**usage, "service_tier": "standard"}}
    return Wire(tuple(events), _dumps(body))


# ------------------------------------------------------------------------- OpenAI Responses

# Request members a Responses response object echoes, with the API's defaults when absent.
_RESPONSES_ECHO = {
    "instructions": None, "max_output_tokens": None, "max_tool_calls": None, "metadata": {},
    "parallel_tool_calls": True, "previous_response_id": None, "prompt_cache_key": None, "reasoning": None,
    "safety_identifier": None, "service_tier": "default", "store": True, "temperature": 1.0,
    "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_logprobs": 0, "top_p": 1.0,
    "truncation": "disabled", "user": None,
}  # fmt: skip


def responses_ids(plan: Plan) -> tuple[str, str]:
    """(response id, id of its message or first function-call item) of a plan's Responses answer."""
    h = f"{plan.seed & 0xFFFFFFFFFFFFFFFF:016x}"
    return f"resp_{h}", (f"fc_{h}" if plan.tool_calls else f"msg_{h}")


def responses_output(plan: Plan) -> list[dict[str, Any]]:
    """The `output` items of a plan's completed Responses answer (what a later request continues
    from, through `previous_response_id`); none when it generated nothing (`synth.warmup`)."""
    item_id = responses_ids(plan)[1]
    if not plan.tool_calls and not plan.tokens:
        return []
    if plan.tool_calls:
        return [{"id": f"{item_id}{index or ''}", "type": "function_call", "status": "completed",
                 "arguments": call.arguments, "call_id": call.id, "name": call.name}
                for index, call in enumerate(plan.tool_calls)]  # fmt: skip
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": plan.text}
    return [{"id": item_id, "type": "message", "status": "completed", "content": [part], "role": "assistant"}]


def _responses_usage(plan: Plan) -> dict[str, Any]:
    return {
        "input_tokens": plan.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": plan.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": plan.prompt_tokens + plan.completion_tokens,
    }


def openai_responses(plan: Plan, meta: Meta) -> Wire:
    """The Responses API: `event:` + `data:` pairs, each event with its `type` and a
    `sequence_number`; the response object in `response.created` / `.in_progress` (status
    in_progress, no output) and in the terminal event (`response.completed`, or
    `response.incomplete` with reason `max_output_tokens` when the answer hit the length limit);
    an answer that generated nothing (`synth.warmup`) is the first two and `response.completed`."""
    rid = responses_ids(plan)[0]
    req = meta.request or {}
    response: dict[str, Any] = {
        "id": rid, "object": "response", "created_at": meta.created, "status": "in_progress", "background": False,
        "error": None, "incomplete_details": None, "model": meta.model, "output": [],
    }  # fmt: skip
    for name, default in _RESPONSES_ECHO.items():
        value = req.get(name)
        response[name] = default if value is None else value
    response["usage"] = None
    output = responses_output(plan)
    incomplete = plan.finish_reason == "length"
    final = {**response, "status": "incomplete" if incomplete else "completed", "output": output,
             "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
             "usage": _responses_usage(plan)}  # fmt: skip
    events: list[tuple[int, bytes]] = []

    def emit(step: int, doc: dict[str, Any]) -> None:
        events.append((step, _event(doc["type"], {"type": doc["type"], "sequence_number": len(events), **doc})))

    emit(0, {"type": "response.created", "response": response})
    emit(0, {"type": "response.in_progress", "response": response})
    if plan.tool_calls:
        step = 0
        for index, item in enumerate(output):
            call = plan.tool_calls[index]
            emit(step, {"type": "response.output_item.added", "output_index": index,
                        "item": {**item, "status": "in_progress", "arguments": ""}})  # fmt: skip
            for frag in call.fragments:
                emit(step, {"type": "response.function_call_arguments.delta", "item_id": item["id"],
                            "output_index": index, "delta": frag})  # fmt: skip
                step += 1
            done_at = max(step - 1, 0)
            emit(done_at, {"type": "response.function_call_arguments.done", "item_id": item["id"],
                           "output_index": index, "name": call.name, "arguments": call.arguments})  # fmt: skip
            emit(done_at, {"type": "response.output_item.done", "output_index": index, "item": item})
    elif output:
        item = output[0]
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        emit(0, {"type": "response.output_item.added", "output_index": 0,
                 "item": {**item, "status": "in_progress", "content": []}})  # fmt: skip
        emit(0, {"type": "response.content_part.added", **where,
                 "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}})  # fmt: skip
        for i, tok in enumerate(plan.tokens):
            emit(i, {"type": "response.output_text.delta", **where, "delta": tok, "logprobs": []})
        last = _last_step(plan)
        emit(last, {"type": "response.output_text.done", **where, "text": plan.text, "logprobs": []})
        emit(last, {"type": "response.content_part.done", **where, "part": item["content"][0]})
        emit(last, {"type": "response.output_item.done", "output_index": 0, "item": item})
    terminal = "response.incomplete" if incomplete else "response.completed"
    emit(_last_step(plan), {"type": terminal, "response": final})
    return Wire(tuple(events), _dumps(final))


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
    "openai_responses": openai_responses,
    "sglang_generate": sglang_generate,
}


def encode(dialect: str, plan: Plan, meta: Meta) -> Wire:
    return ENCODERS[dialect](plan, meta)
