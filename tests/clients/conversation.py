"""A multi-turn conversation held by an official SDK, as an application or harness holds one.

Run with the SDK venv's python (tests/clients/sdk.py starts it): each session keeps one client
(its connection pool, its retries), sends turn after turn with the whole history, streamed, reads
each stream the way the SDK reads it (to its terminal event, then the SDK closes the response),
and prints one JSON line per turn: {"session", "turn", "ok", "error", "text", "finish"}.

    python conversation.py --sdk openai|anthropic --base-url URL [--sessions N] [--turns N]
        [--think S] [--max-tokens N] [--timeout S] [--max-retries N] [--no-stream] [--include-usage]
        [--paste TURN:WORDS]
`--paste`: turn TURN's user message carries WORDS words more (a file pasted in, a long tool
output), which every later turn's history holds too.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time


def ask(args: argparse.Namespace, session: int, turn: int) -> str:
    """The user's message of a turn, with the pasted words on the turn `--paste` names."""
    text = f"session {session} turn {turn}: what next?"
    if args.paste:
        at, words = (int(v) for v in args.paste.split(":"))
        if turn == at:
            text += " Here is the file:\n" + " ".join(f"line{i}" for i in range(words))
    return text


def openai_turns(args: argparse.Namespace, session: int):
    import openai

    client = openai.OpenAI(base_url=args.base_url + "/v1", api_key="sk-test-0000", timeout=args.timeout, max_retries=args.max_retries)
    messages = [{"role": "system", "content": "You are a careful coding assistant."}]
    for turn in range(1, args.turns + 1):
        messages.append({"role": "user", "content": ask(args, session, turn)})
        text, finish = [], None
        if args.stream:
            extra = {"stream_options": {"include_usage": True}} if args.include_usage else {}
            stream = client.chat.completions.create(model=args.model, messages=messages, max_tokens=args.max_tokens, stream=True, **extra)
            for chunk in stream:
                for choice in chunk.choices:
                    text.append(choice.delta.content or "")
                    finish = choice.finish_reason or finish
        else:
            reply = client.chat.completions.create(model=args.model, messages=messages, max_tokens=args.max_tokens)
            text.append(reply.choices[0].message.content or "")
            finish = reply.choices[0].finish_reason
        answer = "".join(text)
        messages.append({"role": "assistant", "content": answer})
        yield turn, answer, finish


def anthropic_turns(args: argparse.Namespace, session: int):
    import anthropic

    client = anthropic.Anthropic(base_url=args.base_url, api_key="sk-ant-test-0000", timeout=args.timeout, max_retries=args.max_retries)
    messages: list[dict] = []
    for turn in range(1, args.turns + 1):
        messages.append({"role": "user", "content": ask(args, session, turn)})
        text, finish = [], None
        if args.stream:
            stream = client.messages.create(model=args.model, messages=messages, max_tokens=args.max_tokens, stream=True, system="Be careful.")
            for event in stream:
                if event.type == "content_block_delta" and getattr(event.delta, "text", None):
                    text.append(event.delta.text)
                elif event.type == "message_delta":
                    finish = event.delta.stop_reason
        else:
            reply = client.messages.create(model=args.model, messages=messages, max_tokens=args.max_tokens, system="Be careful.")
            text.extend(b.text for b in reply.content if b.type == "text")
            finish = reply.stop_reason
        answer = "".join(text)
        messages.append({"role": "assistant", "content": answer})
        yield turn, answer, finish


def run_session(args: argparse.Namespace, session: int, lock: threading.Lock) -> None:
    turns = openai_turns if args.sdk == "openai" else anthropic_turns
    it = turns(args, session)
    turn = 0
    while True:
        try:
            turn, answer, finish = next(it)
            line = {"session": session, "turn": turn, "ok": True, "error": None, "text": answer, "finish": finish}
        except StopIteration:
            return
        except Exception as exc:  # the SDK's error is what a harness would show: report it, stop
            line = {"session": session, "turn": turn + 1, "ok": False, "error": f"{type(exc).__name__}: {exc}", "text": "", "finish": None}
        with lock:
            print(json.dumps(line), flush=True)
        if not line["ok"]:
            return
        time.sleep(args.think)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sdk", choices=("openai", "anthropic"), required=True)
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", default="test-model")
    p.add_argument("--sessions", type=int, default=1)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--think", type=float, default=0.05)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--timeout", type=float, default=20.0)
    p.add_argument("--max-retries", type=int, default=0)
    p.add_argument("--no-stream", dest="stream", action="store_false")
    # OpenAI streams carry usage only when asked (vLLM, like the API, sends none otherwise)
    p.add_argument("--include-usage", action="store_true")
    p.add_argument("--paste", default=None, metavar="TURN:WORDS")
    args = p.parse_args()
    lock = threading.Lock()
    threads = [threading.Thread(target=run_session, args=(args, s, lock)) for s in range(1, args.sessions + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
