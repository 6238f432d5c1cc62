"""Recordings of long agent sessions written in the recorder's own format at chosen times, so a test
can hold minutes of think time without waiting for them: OpenAI chat sessions whose history grows
turn by turn, each turn's recorded answer streamed as the reference engine streams it, and a
failed turn written as the recorder writes a client giving up on a stalled stream ("Client
disconnected." after a silence). The replays of such a recording are real: they go to a real
engine through real hops."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from proxycheck.io.storage import RecordingWriter

CHAT = "/v1/chat/completions"


@dataclass(frozen=True)
class Turn:
    """One recorded turn: `think` seconds after the previous turn ended; `fails` writes it as a
    stream the client gave up on after `waited` seconds of silence (3 events in); `before_headers`
    as a request that never got its headers."""

    think: float = 1.0
    fails: bool = False
    waited: float = 3.0
    before_headers: bool = False


@dataclass(frozen=True)
class Session:
    """A session starting `start` seconds into the recording; `system` the size of its system
    prompt (a large one lets a fault hop's `min_body` pick this session alone); `new_connections`
    opens a connection per turn (else one kept-alive connection for all)."""

    start: float
    turns: Sequence[Turn]
    system: int = 40
    new_connections: bool = False
    name: str = field(default="")


def _sse(text: str) -> list[bytes]:
    words = text.split()
    chunks = [b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n']
    chunks += [b'data: ' + json.dumps({"choices": [{"index": 0, "delta": {"content": w + " "}}]}).encode() + b"\n\n"
               for w in words]  # fmt: skip
    chunks.append(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
    chunks.append(b"data: [DONE]\n\n")
    return chunks


def write(path: Path, engine_url: str, sessions: Sequence[Session], *, answer_words: int = 8,
          event_gap: float = 0.02) -> Path:  # fmt: skip
    """The recording of `sessions` in `path` (as recorded in front of `engine_url`); returns `path`."""
    writer = RecordingWriter(path)
    url = engine_url.rstrip("/") + CHAT
    for n, session in enumerate(sessions, 1):
        name = session.name or f"agent-{n}"
        messages: list[dict[str, str]] = [{"role": "system", "content": f"{name}: " + "x" * session.system}]
        t = session.start
        for k, turn in enumerate(session.turns, 1):
            if k > 1:
                t += turn.think
            messages.append({"role": "user", "content": f"{name} step {k}"})
            body = json.dumps({"model": "m", "stream": True, "max_tokens": answer_words, "messages": messages}).encode()
            client = f"{name}-{k}" if session.new_connections else name
            x = writer.request("POST", url, [("content-type", "application/json"), ("host", "engine")], body, t=t,
                               http_version="HTTP/1.1", conn={"client_id": client})  # fmt: skip
            answer = " ".join(f"w{k}{i}" for i in range(answer_words))
            if turn.fails and turn.before_headers:
                writer.error(x, "Client disconnected.", t=t + turn.waited)
                t += turn.waited
                continue
            writer.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True, t=t + 0.05)
            chunks = _sse(answer)
            if turn.fails:
                chunks = chunks[:3]
            at = t + 0.05
            for chunk in chunks:
                at += event_gap
                writer.data(x, chunk, t=at)
            if turn.fails:
                at += turn.waited
                writer.error(x, "Client disconnected.", t=at)
            else:
                at += 0.005
                writer.end(x, t=at)
            t = at
            messages.append({"role": "assistant", "content": answer})
    writer.close()
    return path
