"""The official Anthropic SDK using what Claude Code uses: extended thinking (streamed with the
SDK's stream helper, then sent back with its signature), `cache_control` breakpoints and the
cache usage fields, `messages.count_tokens`, beta headers.

Run with the SDK venv's python (tests/clients/sdk.py); prints one JSON object of what the SDK
parsed: {"turns": [{"thinking", "signature", "text", "stop", "usage"}], "count_tokens", "plain"}.

    python anthropic_features.py --base-url URL [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import sys

import anthropic

MODEL = "claude-sonnet-4-5"
THINKING = {"type": "enabled", "budget_tokens": 1024}
SYSTEM = [{"type": "text", "text": "You are a careful coding agent. " * 30, "cache_control": {"type": "ephemeral"}}]


def streamed_turn(client: anthropic.Anthropic, messages: list[dict]) -> tuple[dict, list[dict]]:
    thinking, text, signature = [], [], None
    with client.messages.stream(model=MODEL, max_tokens=40, thinking=THINKING, system=SYSTEM, messages=messages) as stream:
        for event in stream:
            if event.type == "thinking":
                thinking.append(event.thinking)
            elif event.type == "signature":
                signature = event.signature
            elif event.type == "text":
                text.append(event.text)
        final = stream.get_final_message()
    usage = final.usage
    seen = {
        "thinking": "".join(thinking), "signature": signature, "text": "".join(text), "stop": final.stop_reason,
        "blocks": [b.type for b in final.content],
        "final_thinking": final.content[0].thinking if final.content[0].type == "thinking" else None,
        "usage": {"input": usage.input_tokens, "output": usage.output_tokens,
                  "cache_read": usage.cache_read_input_tokens, "cache_creation": usage.cache_creation_input_tokens,
                  "ephemeral_5m": usage.cache_creation.ephemeral_5m_input_tokens if usage.cache_creation else None},
    }  # fmt: skip
    return seen, [b.model_dump(exclude_none=True) for b in final.content]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--timeout", type=float, default=20.0)
    args = p.parse_args()
    client = anthropic.Anthropic(base_url=args.base_url, api_key="sk-ant-test-0000", timeout=args.timeout, max_retries=0,
                                 default_headers={"anthropic-beta": "interleaved-thinking-2025-05-14,claude-code-20250219"})
    messages: list[dict] = [{"role": "user", "content": [
        {"type": "text", "text": "turn 1: look at the repository", "cache_control": {"type": "ephemeral"}}]}]
    first, blocks = streamed_turn(client, messages)
    # Turn 1's message keeps its breakpoint (the history is resent as it was), the new one gets one.
    marked = {"type": "text", "text": "turn 2: go on", "cache_control": {"type": "ephemeral"}}
    messages += [{"role": "assistant", "content": blocks}, {"role": "user", "content": [marked]}]
    second, _ = streamed_turn(client, messages)
    counted = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=messages, thinking=THINKING)
    plain = client.messages.create(model=MODEL, max_tokens=40, thinking=THINKING, messages=messages[:1])
    plain_seen = {"blocks": [b.type for b in plain.content], "signature": getattr(plain.content[0], "signature", None)}
    print(json.dumps({"turns": [first, second], "count_tokens": counted.input_tokens, "plain": plain_seen}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
