"""The official OpenAI SDK's Responses WebSocket mode (`client.responses.connect()`, the
`realtime` extra's websockets) as a real client: one socket, `--turns` turns each continuing the
previous response, a JSON line per turn on stdout (the events' types, the response id). Run in
.venv-sdk by tests/clients/test_sdk_responses_socket.py."""

from __future__ import annotations

import argparse
import json
import sys

from openai import OpenAI


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--api-key", default="sk-test-not-a-real-key")
    args = ap.parse_args()
    client = OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0)
    previous = None
    with client.responses.connect(max_retries=0) as connection:
        for turn in range(1, args.turns + 1):
            body = {"model": "proxycheck-agent", "input": [{"role": "user", "content": f"step {turn}"}],
                    "max_output_tokens": 8}  # fmt: skip
            if previous:
                body["previous_response_id"] = previous
            connection.response.create(**body)
            types = []
            for event in connection:
                types.append(event.type)
                if event.type in ("response.completed", "response.failed", "response.incomplete", "error"):
                    break
            last = event
            previous = getattr(getattr(last, "response", None), "id", None)
            print(json.dumps({"turn": turn, "types": types, "id": previous}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
