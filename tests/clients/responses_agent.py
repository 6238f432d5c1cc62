"""An agent loop on the OpenAI Responses API, held by the official SDK, as a harness holds one.

Run with the SDK venv's python (tests/clients/test_sdk_responses.py starts it): one client, a
function tool offered on every request, each function call answered with a tool result, until the
model answers with text (or `--rounds` requests were sent). `--chain previous` continues with
`previous_response_id` (sending only the new items), `--chain resend` resends the whole input.
Prints one JSON line per request: {"round", "ok", "error", "id", "status", "calls", "text",
"usage"}; exits 1 when a request failed.

    python responses_agent.py --base-url URL [--stream | --no-stream] [--chain previous|resend]
        [--rounds N] [--max-output-tokens N] [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import sys

TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file of the project",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]


def one_request(client, args: argparse.Namespace, **kw):
    """The finished response: from the stream's terminal event, or the whole body."""
    common = {"model": "proxycheck-reference", "tools": TOOLS, "max_output_tokens": args.max_output_tokens,
              "instructions": "You are a careful coding assistant."}
    if not args.stream:
        return client.responses.create(**common, **kw)
    final, deltas = None, []
    for event in client.responses.create(**common, **kw, stream=True):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type in ("response.completed", "response.incomplete", "response.failed"):
            final = event.response
    if final is None:
        raise RuntimeError("the stream ended without a terminal event")
    if "".join(deltas) != final.output_text:
        raise RuntimeError(f"streamed text {''.join(deltas)!r} != final text {final.output_text!r}")
    return final


def main() -> int:
    import openai

    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--chain", choices=("previous", "resend"), default="previous")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-output-tokens", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args()
    client = openai.OpenAI(base_url=args.base_url + "/v1", api_key="sk-test-0000", timeout=args.timeout, max_retries=0)
    history: list = [{"role": "user", "content": "Read the readme and summarize it."}]
    new_items, previous = list(history), None
    for n in range(1, args.rounds + 1):
        line = {"round": n, "ok": False, "error": None}
        try:
            if args.chain == "previous" and previous is not None:
                response = one_request(client, args, input=new_items, previous_response_id=previous)
            else:
                response = one_request(client, args, input=history)
        except Exception as exc:  # noqa: BLE001 - the test reads what failed
            line["error"] = f"{type(exc).__name__}: {exc}"
            print(json.dumps(line), flush=True)
            return 1
        calls = [item for item in response.output if item.type == "function_call"]
        usage = response.usage
        line.update(ok=True, id=response.id, status=response.status, calls=[c.name for c in calls],
                    text=response.output_text, usage=usage.total_tokens if usage else None)
        print(json.dumps(line), flush=True)
        if not calls:
            return 0
        results = [{"type": "function_call_output", "call_id": c.call_id, "output": f"contents of {json.loads(c.arguments)['path']}"}
                   for c in calls]
        history += [item.model_dump(exclude_none=True) for item in response.output] + results
        new_items, previous = results, response.id
    return 0


if __name__ == "__main__":
    sys.exit(main())
