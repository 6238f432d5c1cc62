"""The reference engine's OpenAI Responses API (`/v1/responses`), as a real process driven with httpx:
the event sequence, function calls, `store` and `previous_response_id`, faults, and a stream
recorded through the recorder as `sessions` shows it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory, MitmdumpFactory

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.analysis import StreamTracker
from proxycheck.io.procs import Managed

pytestmark = pytest.mark.timeout(60)

PATH = "/v1/responses"
TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]  # fmt: skip


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.005", "--ttft-base", "0.02")


@pytest.fixture(scope="module")
def tool_engine(module_engines: EngineFactory) -> Managed:
    """An engine that calls a tool whenever it may (the rule of two rounds still ends each loop)."""
    return module_engines("--token-interval", "0.002", "--ttft-base", "0.01", "--tool-call-rate", "1")


def post(url: str, doc: dict) -> httpx.Response:
    return httpx.post(url + PATH, content=json.dumps(doc).encode(), headers={"content-type": "application/json"},
                      timeout=10)  # fmt: skip


def events_of(resp: httpx.Response) -> list[tuple[str, dict]]:
    """(event name, data) of each SSE event of a streamed answer."""
    out = []
    for block in resp.text.split("\n\n"):
        if block.strip():
            lines = dict(line.split(": ", 1) for line in block.splitlines())
            out.append((lines["event"], json.loads(lines["data"])))
    return out


def analysed(resp: httpx.Response):
    tracker = StreamTracker("openai_responses")
    tracker.feed(resp.content, 0.1)
    tracker.close(0.2)
    return tracker.analysis()


def test_a_streamed_text_answer_has_the_apis_event_sequence(engine) -> None:
    doc = {"model": "m", "input": "Say something", "max_output_tokens": 6, "stream": True}
    resp = post(engine.url, doc)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["x-proxycheck-request-sha256"] == hashlib.sha256(json.dumps(doc).encode()).hexdigest()
    events = events_of(resp)
    names = [name for name, _ in events]
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * 6, "response.output_text.done",
                     "response.content_part.done", "response.output_item.done", "response.completed"]  # fmt: skip
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(data["type"] == name for name, data in events)
    created, completed = events[0][1]["response"], events[-1][1]["response"]
    assert created["id"].startswith("resp_") and created["status"] == "in_progress" and created["output"] == []
    assert completed["id"] == created["id"] and completed["status"] == "completed"
    (item,) = completed["output"]
    assert item["id"].startswith("msg_") and item["type"] == "message" and item["role"] == "assistant"
    text = "".join(data["delta"] for name, data in events if name == "response.output_text.delta")
    assert item["content"][0]["text"] == text and len(text.split()) == 6
    usage = completed["usage"]
    assert usage["output_tokens"] == 6 and usage["total_tokens"] == usage["input_tokens"] + 6
    assert usage["input_tokens_details"] == {"cached_tokens": 0}
    assert usage["output_tokens_details"] == {"reasoning_tokens": 0}
    # The project's own parser reads it as a complete, ok answer.
    analysis = analysed(resp)
    result = analysis.result
    assert result.terminal and result.malformed == 0 and not analysis.incomplete_tail and not result.errors
    assert result.text == text and result.choices[0].finish_reason == "completed"
    assert result.usage is not None and result.usage.completion_tokens == 6


def test_a_non_streamed_answer_is_the_response_object(engine) -> None:
    resp = post(engine.url, {"model": "m", "instructions": "Be brief.", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "max_output_tokens": 4})  # fmt: skip
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/json")
    doc = resp.json()
    assert doc["object"] == "response" and doc["status"] == "completed" and doc["instructions"] == "Be brief."
    assert doc["usage"]["output_tokens"] == 4
    result = dialects.parse_body("openai_responses", resp.content)
    assert result.terminal and len(result.text.split()) == 4 and not result.errors


def test_offered_tools_get_function_calls_streamed_and_not(tool_engine) -> None:
    doc = {"model": "m", "input": "Read the readme", "tools": TOOLS, "stream": True}
    resp = post(tool_engine.url, doc)
    events = events_of(resp)
    names = [name for name, _ in events]
    assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert names[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert set(names[3:-3]) == {"response.function_call_arguments.delta"}
    added = events[2][1]["item"]
    assert added["type"] == "function_call" and added["name"] == "read_file" and added["arguments"] == ""
    assert added["id"].startswith("fc_") and added["call_id"].startswith("call_")
    arguments = "".join(data["delta"] for name, data in events if name == "response.function_call_arguments.delta")
    assert "path" in json.loads(arguments) and events[-3][1]["arguments"] == arguments
    (call,) = analysed(resp).result.tool_calls
    assert (call.id, call.name, call.arguments_valid) == (added["call_id"], "read_file", True)
    body = post(tool_engine.url, {**doc, "stream": False}).json()
    (item,) = body["output"]
    assert (item["type"], item["call_id"], item["arguments"]) == ("function_call", added["call_id"], arguments)


def test_tool_choice_none_and_hosted_tools_get_text(tool_engine) -> None:
    for extra in ({"tool_choice": "none", "tools": TOOLS}, {"tools": [{"type": "web_search"}]}):
        body = post(tool_engine.url, {"model": "m", "input": "hi", "max_output_tokens": 3, **extra}).json()
        assert [item["type"] for item in body["output"]] == ["message"]


def test_tool_rounds_in_resent_input_end_the_loop(tool_engine) -> None:
    inp: list = [{"role": "user", "content": "go"}]
    kinds = []
    for _ in range(3):
        body = post(tool_engine.url, {"model": "m", "input": inp, "tools": TOOLS, "max_output_tokens": 3}).json()
        (item,) = body["output"]
        kinds.append(item["type"])
        inp = inp + body["output"]
        if item["type"] == "function_call":
            inp.append({"type": "function_call_output", "call_id": item["call_id"], "output": "contents"})
    assert kinds == ["function_call", "function_call", "message"]


def test_previous_response_id_continues_a_stored_conversation(tool_engine) -> None:
    first = post(tool_engine.url, {"model": "m", "input": "go", "tools": TOOLS}).json()
    kinds, previous = [first["output"][0]["type"]], first
    for _ in range(2):
        call = previous["output"][0]
        doc = {"model": "m", "previous_response_id": previous["id"], "tools": TOOLS,
               "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "contents"}]}
        previous = post(tool_engine.url, doc).json()
        assert previous["previous_response_id"] == doc["previous_response_id"]
        kinds.append(previous["output"][0]["type"])
    # The stored tool rounds count as if resent: after two the engine answers with text.
    assert kinds == ["function_call", "function_call", "message"]


def test_an_unknown_or_unstored_previous_response_is_the_apis_400(tool_engine) -> None:
    resp = post(tool_engine.url, {"model": "m", "input": "hi", "previous_response_id": "resp_nope"})
    assert resp.status_code == 400
    assert resp.json() == {"error": {"message": "Previous response with id 'resp_nope' not found.",
                                     "type": "invalid_request_error", "param": "previous_response_id",
                                     "code": "previous_response_not_found"}}  # fmt: skip
    assert "x-proxycheck-request-sha256" in resp.headers
    unstored = post(tool_engine.url, {"model": "m", "input": "not kept", "store": False, "max_output_tokens": 2}).json()
    again = post(tool_engine.url, {"model": "m", "input": "more", "previous_response_id": unstored["id"]})
    assert again.status_code == 400 and again.json()["error"]["code"] == "previous_response_not_found"


def test_faults_count_stored_turns(engines: EngineFactory) -> None:
    proc = engines("--token-interval", "0.002", "--fault", "status:code=503,from_turn=2")
    first = post(proc.url, {"model": "m", "input": "one", "max_output_tokens": 2})
    assert first.status_code == 200 and first.headers["x-proxycheck-turn"] == "1"
    second = post(proc.url, {"model": "m", "input": "two", "previous_response_id": first.json()["id"]})
    assert second.status_code == 503 and second.headers["x-proxycheck-turn"] == "2"


def test_drop_terminal_leaves_a_responses_stream_without_its_end(engines: EngineFactory) -> None:
    proc = engines("--token-interval", "0.002", "--fault", "drop_terminal")
    analysis = analysed(post(proc.url, {"model": "m", "input": "hi", "max_output_tokens": 3, "stream": True}))
    assert analysis.content_events == 3 and not analysis.result.terminal


@pytest.mark.timeout(120)
def test_a_recorded_responses_conversation_is_ok_in_sessions_with_its_tool_calls(
    tool_engine, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    out = tmp_path / "rec"
    hop = mitmdumps.recorder(tool_engine, out)
    inp: list = [{"role": "user", "content": "go"}]
    for _ in range(3):
        resp = post(hop.url, {"model": "m", "input": inp, "tools": TOOLS, "max_output_tokens": 3, "stream": True})
        assert resp.status_code == 200
        output = [data["item"] for name, data in events_of(resp) if name == "response.output_item.done"]
        inp = inp + output
        if output[0]["type"] == "function_call":
            inp.append({"type": "function_call_output", "call_id": output[0]["call_id"], "output": "contents"})
    hop.stop()
    result = run_proxycheck("sessions", str(out), "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    (session,) = doc["sessions"]
    text = json.dumps(session)
    assert len(session["turns"]) == 3, text
    assert [turn["outcome"] for turn in session["turns"]] == ["ok"] * 3, text
    assert [turn["tool_calls"] for turn in session["turns"]] == [["read_file"], ["read_file"], []], text
    assert [turn["finish_reason"] for turn in session["turns"]] == ["completed"] * 3, text
