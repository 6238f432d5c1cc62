"""The synthetic agent's conversation (proxycheck.core.testbed.conversation): request shapes per dialect,
context growth, tool-call round trips from real streamed replies, and determinism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxycheck.core.protocol.analysis import analyze_stream
from proxycheck.core.protocol.result import ToolCall
from proxycheck.core.testbed.conversation import (
    DIALECTS,
    SYSTEM_PROMPT,
    Conversation,
    ConversationConfig,
    synthetic_tool_output,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dialects"


def call(index: int, name: str, arguments: str, id: str | None = None) -> ToolCall:
    return ToolCall.build(index, id, name, arguments)


def conversation(dialect: str, **kw) -> Conversation:
    return Conversation(ConversationConfig(dialect, kw.pop("session", "s1"), **kw))


def streamed_reply(fixture: str, dialect: str):
    """The Result of a recorded stream, as the agent's StreamTracker would assemble it."""
    raw = (FIXTURES / fixture).read_bytes()
    return analyze_stream(dialect, [(0.0, raw)], 0.0).result


# -- the first request ----------------------------------------------------------------------------


def test_openai_first_request_is_a_streamed_chat_with_tools() -> None:
    body = conversation("openai_chat", model="m", max_tokens=64).request_body()
    assert body["model"] == "m" and body["max_tokens"] == 64
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    system, user = body["messages"]
    assert system == {"role": "system", "content": SYSTEM_PROMPT}
    assert user["role"] == "user" and "workspace /work/s1" in user["content"]
    names = [t["function"]["name"] for t in body["tools"]]
    assert names == ["read_file", "run_tests", "write_file"]
    assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in body["tools"])


def test_anthropic_first_request_has_system_apart_and_input_schemas() -> None:
    body = conversation("anthropic_messages").request_body()
    assert body["system"] == SYSTEM_PROMPT and body["stream"] is True
    assert "stream_options" not in body
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert [t["name"] for t in body["tools"]] == ["read_file", "run_tests", "write_file"]
    assert body["tools"][0]["input_schema"]["required"] == ["path"]


def test_an_unsupported_dialect_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported dialect"):
        ConversationConfig("sglang_generate", "s1")


# -- tool-call round trips -------------------------------------------------------------------------


def test_openai_tool_calls_get_one_tool_message_each() -> None:
    conv = conversation("openai_chat", tool_result_bytes=500)
    conv.add_reply("", [call(0, "read_file", '{"path": "a.py"}', "call_a"), call(1, "run_tests", "{}", "call_b")])
    assert conv.turn == 2
    msgs = conv.request_body()["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool"]
    assistant = msgs[2]
    assert assistant["content"] is None
    assert assistant["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}},
    ]
    assert [m["tool_call_id"] for m in msgs[3:]] == ["call_a", "call_b"]
    assert msgs[3]["content"].startswith("# a.py\n") and len(msgs[3]["content"]) == 500
    assert msgs[4]["content"].startswith("$ pytest tests -q\n")


def test_anthropic_tool_use_gets_tool_result_blocks() -> None:
    conv = conversation("anthropic_messages", tool_result_bytes=300)
    calls = [call(0, "read_file", '{"path": "b.py"}', "toolu_1"), call(1, "write_file", "{not json")]
    conv.add_reply("Let me look.", calls)
    msgs = conv.request_body()["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    text, use1, use2 = msgs[1]["content"]
    assert text == {"type": "text", "text": "Let me look."}
    assert use1 == {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "b.py"}}
    # Arguments that are not a JSON object cannot be an Anthropic `input`: {} is sent instead.
    assert use2["input"] == {} and use2["id"] == "toolu_s1_1_1"
    results = msgs[2]["content"]
    assert [r["tool_use_id"] for r in results] == ["toolu_1", "toolu_s1_1_1"]
    assert all(r["type"] == "tool_result" and len(r["content"]) == 300 for r in results)


def test_calls_without_ids_get_stable_ids_that_pair_with_their_results() -> None:
    conv = conversation("openai_chat")
    conv.add_reply("", [call(0, "run_tests", "{}")])
    msgs = conv.request_body()["messages"]
    assert msgs[2]["tool_calls"][0]["id"] == msgs[3]["tool_call_id"] == "call_s1_1_0"


@pytest.mark.parametrize(
    "dialect,fixture,ids",
    [
        ("openai_chat", "openai-chat-tool-calls.sse", ["call_fx_weather_01", "call_fx_time_02"]),
        ("anthropic_messages", "anthropic-tool-use.sse", ["toolu_fx01", "toolu_fx02"]),
    ],
)
def test_a_streamed_tool_call_reply_round_trips_into_the_next_request(dialect: str, fixture: str, ids: list[str]):
    result = streamed_reply(fixture, dialect)
    conv = conversation(dialect, tool_result_bytes=200)
    conv.add_reply(result.text, result.tool_calls)
    msgs = conv.request_body()["messages"]
    if dialect == "openai_chat":
        sent = msgs[2]["tool_calls"]
        assert [c["id"] for c in sent] == ids
        assert [json.loads(c["function"]["arguments"]) for c in sent] == [c.parsed for c in result.tool_calls]
        assert [m["tool_call_id"] for m in msgs[3:]] == ids
    else:
        blocks = msgs[1]["content"]
        assert blocks[0] == {"type": "text", "text": result.text}
        assert [b["id"] for b in blocks[1:]] == ids
        assert blocks[1]["input"] == {"location": "San Francisco, CA", "unit": "fahrenheit"}
        assert blocks[2]["input"] == {}  # a parameterless call
        assert [r["tool_use_id"] for r in msgs[2]["content"]] == ids


# -- text replies and failed turns -----------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_text_reply_is_followed_by_a_new_user_message(dialect: str) -> None:
    conv = conversation(dialect)
    conv.add_reply("Done: the bug was in the parser.", [])
    msgs = conv.request_body()["messages"][-3:]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["content"] == "Done: the bug was in the parser."
    assert msgs[2]["content"] and msgs[2]["content"] != msgs[0]["content"]
    assert conv.turn == 2


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_interrupted_turn_still_counts_as_a_turn(dialect: str) -> None:
    conv = conversation(dialect)
    conv.add_interrupted("", "stall_mid_stream")
    assert conv.turn == 2
    assistant, user = conv.request_body()["messages"][-2:]
    assert assistant == {"role": "assistant", "content": "(no reply)"}
    assert "cut off (stall_mid_stream)" in user["content"]


# -- growth and determinism ------------------------------------------------------------------------


def play(dialect: str, turns: int, **kw) -> list[bytes]:
    """The bodies of `turns` turns, alternating tool-call and text replies."""
    conv = conversation(dialect, **kw)
    bodies = []
    for turn in range(1, turns + 1):
        bodies.append(conv.encode())
        if turn % 2:
            conv.add_reply("", [call(0, "read_file", json.dumps({"path": f"f{turn}.py"}))])
        else:
            conv.add_reply(f"answer {turn}", [])
    return bodies


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_request_grows_every_turn_by_about_the_tool_results(dialect: str) -> None:
    bodies = play(dialect, 6, tool_result_bytes=2000)
    sizes = [len(b) for b in bodies]
    assert all(b > a for a, b in zip(sizes, sizes[1:]))
    assert sizes[1] - sizes[0] > 2000  # the tool result, plus the call that asked for it
    turns = [sum(m["role"] == "assistant" for m in json.loads(b)["messages"]) + 1 for b in bodies]
    assert turns == [1, 2, 3, 4, 5, 6]  # the fault addon's turn numbering


@pytest.mark.parametrize("dialect", DIALECTS)
def test_same_configuration_and_replies_give_identical_bodies(dialect: str) -> None:
    assert play(dialect, 5) == play(dialect, 5)


def test_sessions_and_seeds_make_different_conversations() -> None:
    base = play("openai_chat", 3)
    assert play("openai_chat", 3, session="s2")[0] != base[0]
    assert play("openai_chat", 3, seed=1)[1] != base[1]


# -- without tools (an engine serving a model without tool calls) ----------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_without_tools_no_tools_are_offered_and_each_follow_up_pastes_a_test_output(dialect: str) -> None:
    conv = conversation(dialect, tools=False, tool_result_bytes=1500)
    first = conv.request_body()
    assert "tools" not in first and "tool_choice" not in first
    conv.add_reply("I would run the tests first.", [])
    body = conv.request_body()
    assert "tools" not in body
    follow_up = body["messages"][-1]
    assert follow_up["role"] == "user" and "The test output:\n$ pytest tests -q\n" in follow_up["content"]
    assert len(follow_up["content"]) > 1500  # the pasted output, of the tool result's size, and the ask


@pytest.mark.parametrize("dialect", DIALECTS)
def test_without_tools_the_request_grows_every_turn_by_about_the_pasted_output(dialect: str) -> None:
    """The demo on vLLM gates its gateway's fault on the body size: each turn must add the paste
    whatever the (sampled) answer was, an empty one too."""
    answers = ("", "A longer answer that the model sampled this time. " * 4, "")
    bodies = []
    for _ in range(2):  # twice: the same replies give the same bodies
        conv = conversation(dialect, tools=False, tool_result_bytes=2000)
        sizes = [len(conv.encode())]
        for answer in answers:
            conv.add_reply(answer, [])
            sizes.append(len(conv.encode()))
        bodies.append(conv.encode())
    beyond_answers = [b - a - len(answer) for a, b, answer in zip(sizes, sizes[1:], answers)]
    assert all(2000 < g < 2250 for g in beyond_answers), beyond_answers
    assert bodies[0] == bodies[1]


def test_request_body_is_a_copy_the_caller_may_change() -> None:
    conv = conversation("openai_chat")
    conv.request_body()["messages"].append({"role": "user", "content": "x"})
    assert len(conv.request_body()["messages"]) == 2 == conv.message_count


@given(size=st.integers(0, 20_000), name=st.sampled_from(["read_file", "run_tests", "write_file", "other"]))
def test_tool_output_has_the_requested_size_and_is_ascii(size: int, name: str) -> None:
    config = ConversationConfig("openai_chat", "s1", tool_result_bytes=size)
    out = synthetic_tool_output(config, 3, call(0, name, '{"path": "x.py"}'))
    assert len(out.encode()) == len(out) == size
    assert out == synthetic_tool_output(config, 3, call(0, name, '{"path": "x.py"}'))


def test_tool_output_depends_on_turn_and_arguments() -> None:
    config = ConversationConfig("openai_chat", "s1", tool_result_bytes=400)
    a = synthetic_tool_output(config, 1, call(0, "read_file", '{"path": "a.py"}'))
    assert a != synthetic_tool_output(config, 2, call(0, "read_file", '{"path": "a.py"}'))
    assert a != synthetic_tool_output(config, 1, call(0, "read_file", '{"path": "b.py"}'))
