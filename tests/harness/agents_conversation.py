"""A small OpenAI Agents SDK program, run with .venv-agents's python by the Agents SDK tests
(tests/harness/test_agents_sdk*.py) as a separate process (the SDK rides an openai release that
mitmproxy's venv cannot hold): an agent with one function tool, `Runner.run` (or, with --stream,
`Runner.run_streamed`, every event read) against BASE_URL on the Responses API or Chat Completions,
for several user turns of one conversation (each turn's input is the last result's items plus the
new user message). Prints one JSON line per user turn: its number, the function calls the agent ran
and their outputs, the final output, and the error (if any); exit 1 after a turn that failed."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

NOTES = {"readme": "A small project the harness reads.", "todo": "Nothing left to do."}
QUESTIONS = ["What does the readme note say?", "And the todo note?", "Thanks. Anything else?"]
calls: list[dict[str, str]] = []
# --output-bytes: the least length of a tool output (0: as it is).
output_bytes = 0


@function_tool
def read_note(name: str) -> str:
    """Read one of the project's notes by its name (readme or todo)."""
    text = NOTES.get(name.strip().lower(), f"no note named {name!r}; the notes are: {', '.join(NOTES)}")
    text = padded(text, output_bytes)
    calls.append({"name": name, "output": text})
    return text


def padded(text: str, size: int) -> str:
    """`text` followed by numbered lines up to `size` characters (a tool output that long makes the
    request that carries it that much larger than the one before: a hop's body-size gate tells
    them apart)."""
    if len(text) >= size:
        return text
    lines = "".join(f"\nline {n} of the note." for n in range(size // 16 + 1))
    return (text + lines)[:size]


async def run_turn(agent: Agent, items: list, *, max_turns: int, stream: bool):
    """One user turn: the agent's run over `items` to its final output."""
    if not stream:
        return await Runner.run(agent, items, max_turns=max_turns)
    result = Runner.run_streamed(agent, items, max_turns=max_turns)
    async for _event in result.stream_events():  # a failed model call raises here
        pass
    return result


async def conversation(agent: Agent, args: argparse.Namespace) -> int:
    history: list = []
    for number, question in enumerate(QUESTIONS[: args.turns], start=1):
        before = len(calls)
        line: dict = {"turn": number}
        try:
            result = await run_turn(agent, [*history, {"role": "user", "content": question}], max_turns=args.max_turns,
                                    stream=args.stream)  # fmt: skip
        except Exception as exc:  # the test reads what went wrong from this line
            line.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:2000], tool_calls=calls[before:])
            print(json.dumps(line), flush=True)
            return 1
        history = result.to_input_list()
        line.update(ok=True, tool_calls=calls[before:], final_output=str(result.final_output),
                    model_calls=len(result.raw_responses))  # fmt: skip
        print(json.dumps(line), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True, help="the server's URL; /v1 is appended")
    parser.add_argument("--api", choices=("responses", "chat"), default="responses")
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=6, help="the SDK's bound on model calls per run")
    parser.add_argument("--stream", action="store_true", help="stream the model's answers (Runner.run_streamed)")
    parser.add_argument("--output-bytes", type=int, default=0, help="pad each tool output to this many characters")
    args = parser.parse_args()
    global output_bytes
    output_bytes = args.output_bytes
    set_tracing_disabled(True)  # no trace export to the vendor
    client = AsyncOpenAI(base_url=args.base_url.rstrip("/") + "/v1", api_key="sk-proxycheck-dummy-key", max_retries=0,
                         timeout=30)  # fmt: skip
    model_class = OpenAIResponsesModel if args.api == "responses" else OpenAIChatCompletionsModel
    agent = Agent(name="notes", instructions="Answer from the project's notes; read them with read_note.",
                  tools=[read_note], model=model_class(model="proxycheck-model", openai_client=client))  # fmt: skip
    return asyncio.run(conversation(agent, args))


if __name__ == "__main__":
    sys.exit(main())
