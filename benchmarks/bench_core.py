"""Core benchmarks, measured side by side in one run on this machine.

(a) Parsing: SSE framing + the OpenAI chat dialect over a 100k-event stream, fed in 4 KiB reads
    and in one read per event, against a naive `split(b"\\n\\n")` + `json.loads` loop (which is
    wrong on CRLF streams, comments and events split across reads). Goal: ratio >= 0.5.
(b) Storage: bytes on disk for one 50-turn session whose context grows 4 KB a turn, against its
    unique content (goal <= 1.5) and against storing each request body whole.
(c) Analysis: loading, summarizing and planning a recording with each response parsed once (the
    plan takes the summary's analysis) against parsing it again for the plan, as before.
(d) Redaction: the recorder's default redaction of a request body (every field whose name says it
    is a credential, at any depth outside the conversation and tool schemas) against the
    `json.loads` of the same body that cutting it into pieces does anyway, on an agent's request
    (50 messages, 12 tools with schemas, 200 KB) and on one that carries two secrets.

Prints a table and, with --json FILE, writes the figures. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.sse import SSEEvent, SSEParser
from proxycheck.core.recording.redact import RedactionPolicy, redact_body
from proxycheck.core.recording.summary import summarize_sessions
from proxycheck.core.replay.plan import plan_sessions
from proxycheck.io.recordings import open_recording
from proxycheck.io.storage import RecordingWriter, load


def chat_stream(n_events: int, seed: int = 1) -> tuple[bytes, str]:
    """A realistic OpenAI chat stream (vLLM-shaped chunks) and the text it carries."""
    rnd = random.Random(seed)
    words = ["the", " parser", " frames", " events", " on", " reassembled", " bytes", ",", " never", " chunks", "."]
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1764400000, "model": "qwen3-coder"}
    out = [b"data: " + json.dumps({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                         "logprobs": None, "finish_reason": None}]}).encode() + b"\n\n"]
    text = []
    for _ in range(n_events - 3):
        w = rnd.choice(words)
        text.append(w)
        chunk = {**head, "choices": [{"index": 0, "delta": {"content": w}, "logprobs": None, "finish_reason": None}]}
        out.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    out.append(b"data: " + json.dumps({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                                        "usage": {"prompt_tokens": 10, "completion_tokens": n_events - 3,
                                                  "total_tokens": n_events + 7}}).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out), "".join(text)


def naive(raw: bytes) -> int:
    n = 0
    for block in raw.split(b"\n\n"):
        if block.startswith(b"data: ") and block != b"data: [DONE]":
            json.loads(block[6:])
            n += 1
    return n + 1  # [DONE]


def ours(reads: list[bytes], expect: str) -> int:
    parser = SSEParser()
    acc = dialects.accumulator("openai_chat")
    feed = acc.feed
    n = 0
    t = 0.0
    for chunk in reads:
        for item in parser.feed(chunk, t):
            if type(item) is SSEEvent:
                feed(item.type, item.data)
                n += 1
        t += 0.001
    parser.close(t)
    result = acc.result()
    if result.text != expect or not result.terminal:
        raise SystemExit("benchmark: the parse was wrong")
    return n


def best_rate(fn, n_events: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = fn()
        elapsed = time.perf_counter() - t0
        if got != n_events:
            raise SystemExit(f"benchmark: counted {got} events, expected {n_events}")
        best = min(best, elapsed)
    return n_events / best


def bench_parse(n_events: int, repeat: int) -> dict:
    raw, text = chat_stream(n_events)
    reads_4k = [raw[i : i + 4096] for i in range(0, len(raw), 4096)]
    reads_event = [block + b"\n\n" for block in raw.split(b"\n\n") if block]
    # Random splits give the same result (correct on every split), checked once, not timed.
    rnd = random.Random(7)
    cuts = sorted(rnd.sample(range(1, len(raw)), 5000))
    ours([raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])], text)
    rates = {}
    # Interleave the contenders so machine noise hits them alike.
    for _ in range(2):
        for name, fn in [
            ("naive", lambda: naive(raw)),
            ("ours_4k", lambda: ours(reads_4k, text)),
            ("ours_per_event", lambda: ours(reads_event, text)),
        ]:
            rates[name] = max(rates.get(name, 0.0), best_rate(fn, n_events, repeat))
    return {
        "events": n_events,
        "stream_bytes": len(raw),
        "naive_events_per_s": round(rates["naive"]),
        "ours_4k_events_per_s": round(rates["ours_4k"]),
        "ours_per_event_events_per_s": round(rates["ours_per_event"]),
        "ratio_4k": round(rates["ours_4k"] / rates["naive"], 3),
        "ratio_per_event": round(rates["ours_per_event"] / rates["naive"], 3),
    }


def bench_storage(turns: int, growth: int) -> dict:
    """One session: each turn adds a user message and the assistant's reply (growth bytes)."""
    rnd = random.Random(3)
    system = {"role": "system", "content": "You are a coding agent." + " Follow the repository conventions." * 20}
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "d" * 200,
                                               "parameters": {"type": "object"}}} for i in range(8)]
    messages = [system]
    whole = 0
    unique = len(json.dumps(tools)) + len(json.dumps(system))
    with tempfile.TemporaryDirectory() as tmp:
        w = RecordingWriter(Path(tmp) / "rec")
        for _ in range(turns):
            user = {"role": "user", "content": "".join(rnd.choice("abcdefgh ") for _ in range(growth // 2))}
            messages.append(user)
            body = json.dumps({"model": "m", "messages": messages, "tools": tools, "stream": True}).encode()
            whole += len(body)
            unique += len(json.dumps(user)) + 60  # the message, and the body's small members
            x = w.request("POST", "http://engine/v1/chat/completions",
                          [("content-type", "application/json"), ("user-agent", "bench/1")], body)
            reply_text = "".join(rnd.choice("ijklmnop ") for _ in range(growth // 2))
            w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True)
            sse, _ = reply_sse(reply_text)
            for i in range(0, len(sse), 300):
                w.data(x, sse[i : i + 300])
            w.end(x)
            whole += len(sse)
            unique += len(sse)
            messages.append({"role": "assistant", "content": reply_text})
            unique += len(json.dumps(messages[-1]))
        w.close()
        on_disk = sum(p.stat().st_size for p in (Path(tmp) / "rec").rglob("*") if p.is_file())
    return {
        "turns": turns,
        "growth_per_turn": growth,
        "bytes_on_disk": on_disk,
        "unique_content": unique,
        "whole_bodies": whole,
        "ratio_to_unique": round(on_disk / unique, 3),
        "ratio_to_whole": round(on_disk / whole, 3),
    }


def bench_analysis(sessions: int, turns: int, repeat: int) -> dict:
    """Load + summarize + plan a recording of `sessions` x `turns` streamed turns, each way."""
    rnd = random.Random(5)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "rec"
        w = RecordingWriter(root)
        t = 0.0
        for s in range(sessions):
            messages = [{"role": "user", "content": f"session {s}"}]
            for _ in range(turns):
                body = json.dumps({"model": "m", "messages": messages, "stream": True}).encode()
                x = w.request("POST", "http://engine/v1/chat/completions", [("content-type", "application/json")],
                              body, t=t)  # fmt: skip
                w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True, t=t + 0.1)
                text = "".join(rnd.choice("abcdefgh ") for _ in range(2000))
                sse, _ = reply_sse(text)
                for i in range(0, len(sse), 400):
                    w.data(x, sse[i : i + 400], t=t + 0.2 + i * 1e-5)
                w.end(x, t=t + 1.0)
                messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "go on"}]
                t += 1.5
        w.close()

        def twice() -> int:  # before: the plan parsed every response again
            rec = load(root)
            summaries = summarize_sessions(rec.exchanges, rec.piece)
            bare = [replace(s, turns=tuple(replace(t, analysis=None) for t in s.turns)) for s in summaries]
            return len(plan_sessions(rec.exchanges, rec.piece, bare))

        def once() -> int:
            return len(open_recording(str(root)).planned)

        best = {"twice": float("inf"), "once": float("inf")}
        for _ in range(repeat):  # interleaved, so machine noise hits both alike
            for name, fn in (("twice", twice), ("once", once)):
                t0 = time.perf_counter()
                if fn() != sessions:
                    raise SystemExit("benchmark: the plan lost sessions")
                best[name] = min(best[name], time.perf_counter() - t0)
    return {"sessions": sessions, "turns": turns, "seconds_two_parses": round(best["twice"], 4),
            "seconds_one_parse": round(best["once"], 4), "ratio": round(best["twice"] / best["once"], 3)}  # fmt: skip


def agent_request(secrets: bool) -> bytes:
    """A coding agent's chat request: a long conversation with tool calls and results, and tools
    offered with their JSON schemas (which hold `password`/`token` properties of their own)."""
    rnd = random.Random(9)
    text = lambda n: "".join(rnd.choice("abcdefgh ijk\n") for _ in range(n))  # noqa: E731
    messages: list[dict] = [{"role": "system", "content": text(4000)}]
    for i in range(25):
        messages.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
                         "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{i}.py"})}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": text(6000)})
    schema = {"type": "object", "properties": {"path": {"type": "string"}, "token": {"type": "string"},
                                               "password": {"type": "string"}}, "required": ["path"]}
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": text(200), "parameters": schema}}
             for i in range(12)]
    doc: dict = {"model": "qwen3-coder", "messages": messages, "tools": tools, "stream": True, "max_tokens": 4096,
                 "stream_options": {"include_usage": True}, "metadata": {"user": "ann"}}
    if secrets:
        doc["metadata"] |= {"api_key": "sk-secret", "session_token": "t0ken"}
    return json.dumps(doc).encode()  # fmt: skip


def bench_redaction(repeat: int) -> dict:
    policy = RedactionPolicy.default()
    out: dict = {}
    for name, secrets in (("clean", False), ("two_secrets", True)):
        body = agent_request(secrets)
        redacted, removed = redact_body(body, policy)
        if (removed != []) is not secrets or (redacted == body) is secrets:
            raise SystemExit("benchmark: redaction did not do what it should")
        best = {"loads": float("inf"), "redact": float("inf")}
        for _ in range(repeat * 5):  # interleaved, so machine noise hits both alike
            for what, fn in (("loads", lambda: json.loads(body)), ("redact", lambda: redact_body(body, policy))):
                t0 = time.perf_counter()
                fn()
                best[what] = min(best[what], time.perf_counter() - t0)
        out[name] = {"bytes": len(body), "seconds_json_loads": round(best["loads"], 6),
                     "seconds_redact": round(best["redact"], 6), "ratio": round(best["redact"] / best["loads"], 2)}
    return out


def reply_sse(text: str) -> tuple[bytes, int]:
    pieces = [text[i : i + 16] for i in range(0, len(text), 16)]
    out = [b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": p}}]}).encode() + b"\n\n" for p in pieces]
    out.append(b"data: [DONE]\n\n")
    return b"".join(out), len(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    parse = bench_parse(args.events, args.repeat)
    storage = bench_storage(50, 4000)
    analysis = bench_analysis(10, 20, args.repeat)
    redaction = bench_redaction(args.repeat)
    print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}")
    print(f"(a) parse {parse['events']} events ({parse['stream_bytes'] / 1e6:.1f} MB), events/s:")
    print(f"    naive split+json.loads   {parse['naive_events_per_s']:>10,}")
    print(f"    ours, 4 KiB reads        {parse['ours_4k_events_per_s']:>10,}   ratio {parse['ratio_4k']:.2f} (goal >= 0.5)")
    print(f"    ours, one read per event {parse['ours_per_event_events_per_s']:>10,}   ratio {parse['ratio_per_event']:.2f}")
    print(f"(b) {storage['turns']}-turn session, context +{storage['growth_per_turn']} B a turn:")
    print(f"    on disk {storage['bytes_on_disk']:,} B; unique content {storage['unique_content']:,} B; "
          f"whole bodies {storage['whole_bodies']:,} B")
    print(f"    ratio to unique {storage['ratio_to_unique']:.2f} (goal <= 1.5); ratio to whole bodies {storage['ratio_to_whole']:.3f}")
    print(f"(c) load + summarize + plan, {analysis['sessions']} sessions x {analysis['turns']} streamed turns:")
    print(f"    responses parsed twice {analysis['seconds_two_parses']:.3f} s; once {analysis['seconds_one_parse']:.3f} s; "
          f"ratio {analysis['ratio']:.2f}")
    print("(d) default redaction of an agent's request body, against the json.loads the recorder does anyway:")
    for name, r in redaction.items():
        print(f"    {name:<12} {r['bytes'] / 1e3:.0f} KB: json.loads {r['seconds_json_loads'] * 1e3:.2f} ms; "
              f"redact {r['seconds_redact'] * 1e3:.2f} ms; ratio {r['ratio']:.2f}")
    if args.json:
        doc = {"parse": parse, "storage": storage, "analysis": analysis, "redaction": redaction}
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
