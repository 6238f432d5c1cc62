"""What the reference engine refuses when told to refuse as vLLM does (core/testbed/refusals): the
checks, their order and vLLM's error bodies, as recorded from vLLM 0.32."""

from __future__ import annotations

from proxycheck.core.testbed.refusals import Limits, refusal

ALL = Limits(served_model="smollm2-135m", max_model_len=100, tool_parser=False)
TOOLS_OA = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
TOOLS_AN = [{"name": "ls", "input_schema": {"type": "object"}}]


def chat(**extra: object) -> dict:
    return {"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}


def test_by_default_nothing_is_refused() -> None:
    assert not Limits().any
    req = chat(model="test-model", tools=TOOLS_OA)
    assert refusal("openai_chat", req, 10**6, Limits()) is None


def test_another_model_name_is_vllms_404_and_no_name_is_served() -> None:
    refused = refusal("openai_chat", chat(model="test-model"), 5, ALL)
    assert refused is not None and refused.status == 404
    assert refused.body == {"error": {
        "message": "The model `test-model` does not exist. Valid aliases: smollm2-135m.",
        "type": "NotFoundError", "param": "model", "code": 404}}  # fmt: skip
    assert refusal("openai_chat", chat(model=""), 5, ALL) is None
    assert refusal("openai_chat", {k: v for k, v in chat().items() if k != "model"}, 5, ALL) is None
    assert refusal("sglang_generate", {"text": "hi", "model": "other"}, 5, ALL) is None  # /generate names none


def test_the_messages_api_is_refused_in_the_anthropic_shape() -> None:
    refused = refusal("anthropic_messages", chat(model="claude-x"), 5, ALL)
    assert refused is not None and refused.status == 404
    assert refused.body["type"] == "error" and refused.body["error"]["type"] == "NotFoundError"
    assert refused.message.startswith("The model `claude-x` does not exist")


def test_the_model_is_checked_before_the_tools_and_the_window() -> None:
    refused = refusal("openai_chat", chat(model="other", tools=TOOLS_OA), 10**6, ALL)
    assert refused is not None and refused.status == 404


def test_tools_without_a_tool_parser_are_refused_unless_the_choice_is_none() -> None:
    auto = refusal("openai_chat", chat(tools=TOOLS_OA), 5, ALL)  # no tool_choice: vLLM's default is auto
    assert auto is not None and auto.status == 400
    assert auto.message == '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    assert auto.body["error"]["param"] is None and auto.body["error"]["type"] == "BadRequestError"
    required = refusal("openai_chat", chat(tools=TOOLS_OA, tool_choice="required"), 5, ALL)
    assert required is not None and required.message == 'tool_choice="required" requires --tool-call-parser to be set'
    named = refusal("openai_chat", chat(tools=TOOLS_OA, tool_choice={"type": "function", "function": {"name": "ls"}}),
                    5, ALL)  # fmt: skip
    assert named is not None and named.message == 'tool_choice=function "ls" requires --tool-call-parser to be set'
    assert refusal("openai_chat", chat(tools=TOOLS_OA, tool_choice="none"), 5, ALL) is None
    assert refusal("openai_chat", chat(tools=[]), 5, ALL) is None


def test_an_anthropic_request_with_tools_is_refused_unless_its_choice_is_none() -> None:
    absent = refusal("anthropic_messages", chat(tools=TOOLS_AN), 5, ALL)  # as recorded from vLLM: refused
    assert absent is not None and absent.status == 400
    assert absent.body == {"type": "error", "error": {"type": "BadRequestError", "message":
                           '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'}}
    auto = refusal("anthropic_messages", chat(tools=TOOLS_AN, tool_choice={"type": "auto"}), 5, ALL)
    assert auto is not None and auto.message == absent.message
    anyone = refusal("anthropic_messages", chat(tools=TOOLS_AN, tool_choice={"type": "any"}), 5, ALL)
    assert anyone is not None and '"required"' in anyone.message
    named = refusal("anthropic_messages", chat(tools=TOOLS_AN, tool_choice={"type": "tool", "name": "ls"}), 5, ALL)
    assert named is not None and 'function "ls"' in named.message
    assert refusal("anthropic_messages", chat(tools=TOOLS_AN, tool_choice={"type": "none"}), 5, ALL) is None


def test_a_prompt_past_the_window_is_vllms_400_and_one_within_it_is_served() -> None:
    refused = refusal("openai_chat", chat(), 101, ALL)
    assert refused is not None and refused.status == 400
    assert refused.body["error"]["param"] == "input_tokens"
    assert refused.message.startswith("This model's maximum context length is 100 tokens. However, your prompt "
                                      "contains at least 101 input tokens")  # fmt: skip
    # max_tokens reaching past the window is no refusal: vLLM shortens the answer
    assert refusal("openai_chat", chat(max_tokens=10**6), 100, ALL) is None
    assert refusal("openai_completions", {"prompt": "x", "max_tokens": 4}, 101, ALL) is not None
