"""Writes replays/example-agent: a small, synthetic recording of two agent sessions.

Session 1 is an OpenAI-style coding agent: two tool-call turns, an answer, then a fourth turn
whose 24 KB request stalls after 12 events and is still in flight when the recorder stops (what a
wedge looks like in a recording). Session 2 is an Anthropic-style chat of two clean turns.

Run `python replays/make_example.py` to regenerate it after a change of the recording format.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from proxycheck.io.storage import RecordingWriter

OUT = Path(__file__).parent / "example-agent"
ENGINE = "http://127.0.0.1:30000"
GATEWAY = "http://127.0.0.1:4000"
TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file of the repository.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "run_tests", "description": "Run the test suite.",
     "parameters": {"type": "object", "properties": {"args": {"type": "string"}}}}},
]


def chunk(delta: dict, finish: str | None = None) -> bytes:
    doc = {"id": "chatcmpl-ex", "object": "chat.completion.chunk", "created": 1764400000, "model": "qwen3-coder",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


def usage(prompt: int, completion: int) -> bytes:
    doc = {"id": "chatcmpl-ex", "object": "chat.completion.chunk", "created": 1764400000, "model": "qwen3-coder",
           "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                    "total_tokens": prompt + completion}}
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


def text_stream(words: list[str]) -> list[bytes]:
    return [chunk({"role": "assistant", "content": ""})] + [chunk({"content": w}) for w in words] + [
        chunk({}, "stop"), usage(900, len(words)), b"data: [DONE]\n\n"]


def tool_stream(name: str, args: str) -> list[bytes]:
    head = {"tool_calls": [{"index": 0, "id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": ""}}]}
    pieces = [args[i:i + 6] for i in range(0, len(args), 6)]
    return [chunk({"role": "assistant", "content": None}), chunk(head)] + [
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces] + [
        chunk({}, "tool_calls"), usage(700, len(pieces)), b"data: [DONE]\n\n"]


def exchange(w: RecordingWriter, t: float, url: str, body: dict, events: list[bytes], *, gap: float = 0.03,
             ttft: float = 0.35, finish: bool = True, client: str = "c1") -> float:
    raw = json.dumps(body).encode()
    headers = [("content-type", "application/json"), ("authorization", "Bearer sk-example-not-a-key"),
               ("user-agent", "example-agent/1.0")]
    x = w.request("POST", url, headers, raw, http_version="HTTP/1.1", t=t,
                  conn={"client_id": client, "server_id": f"{client}-up", "http_version": "HTTP/1.1", "tls": False})
    w.response(x, 200, "OK", [("content-type", "text/event-stream"), ("cache-control", "no-cache")], streamed=True,
               t=t + 0.02, http_version="HTTP/1.1")
    now = t + ttft
    for ev in events:
        w.data(x, ev, t=now)
        now += gap
    if finish:
        w.end(x, t=now)
    return now


def main() -> int:
    if OUT.exists():
        shutil.rmtree(OUT)
    w = RecordingWriter(OUT, source={"generator": "replays/make_example.py"}, wall=lambda: 1764400000.0)
    url = f"{GATEWAY}/v1/chat/completions"
    msgs: list[dict] = [
        {"role": "system", "content": "You are a coding agent. Use the tools to inspect and test the repository."},
        {"role": "user", "content": "The test test_parser fails on CI. Find out why."},
    ]
    base = {"model": "qwen3-coder", "stream": True, "stream_options": {"include_usage": True}, "tools": TOOLS}
    t = exchange(w, 1.0, url, {**base, "messages": msgs}, tool_stream("read_file", '{"path": "src/parser.py"}'))
    msgs += [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_read_file", "type": "function",
              "function": {"name": "read_file", "arguments": '{"path": "src/parser.py"}'}}]},
             {"role": "tool", "tool_call_id": "call_read_file", "content": "def parse(data):\n    ...\n" * 120}]
    t = exchange(w, t + 1.4, url, {**base, "messages": msgs}, tool_stream("run_tests", '{"args": "-k test_parser"}'))
    msgs += [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_run_tests", "type": "function",
              "function": {"name": "run_tests", "arguments": '{"args": "-k test_parser"}'}}]},
             {"role": "tool", "tool_call_id": "call_run_tests", "content": "FAILED test_parser - UnicodeDecodeError\n" * 40}]
    answer = "The parser decodes each chunk on its own , so a UTF-8 character split across chunks fails .".split()
    t = exchange(w, t + 2.1, url, {**base, "messages": msgs}, text_stream([a + " " for a in answer]))
    msgs += [{"role": "assistant", "content": " ".join(answer)},
             {"role": "user", "content": "Fix it. Here is the full log:\n" + "log line with detail\n" * 900}]
    # Turn 4: 12 events arrive, then nothing; the recorder is stopped while the client waits.
    exchange(w, t + 6.0, url, {**base, "messages": msgs}, text_stream(["Decode", " only", " complete", " lines"] * 10)[:12],
             finish=False)

    a_url = f"{ENGINE}/v1/messages"
    chat = [{"role": "user", "content": "Summarize the design of an SSE parser in two sentences."}]

    def anthropic(text: str) -> list[bytes]:
        def ev(name: str, doc: dict) -> bytes:
            return f"event: {name}\ndata: {json.dumps(doc)}\n\n".encode()
        out = [ev("message_start", {"type": "message_start", "message": {"id": "msg_ex", "type": "message", "role": "assistant",
               "model": "claude-example", "content": [], "stop_reason": None, "usage": {"input_tokens": 40, "output_tokens": 1}}}),
               ev("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
               ev("ping", {"type": "ping"})]
        out += [ev("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w + " "}})
                for w in text.split()]
        out += [ev("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 20}}),
                ev("message_stop", {"type": "message_stop"})]
        return out

    reply = "Feed bytes, emit events. Frame on the reassembled stream, never on chunk boundaries."
    abody = {"model": "claude-example", "max_tokens": 512, "stream": True, "messages": chat}
    t2 = exchange(w, 3.0, a_url, abody, anthropic(reply), client="c2")
    chat = chat + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And the hardest edge case?"}]
    exchange(w, t2 + 3.2, a_url, {**abody, "messages": chat},
             anthropic("A CR at the end of one chunk followed by LF in the next."), client="c2")
    w.close("SIGTERM")
    return 0


if __name__ == "__main__":
    sys.exit(main())
