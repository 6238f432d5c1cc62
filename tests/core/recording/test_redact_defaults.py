"""The default redaction: every credential-named header, query parameter and request body field is
redacted, and nothing else of a real OpenAI, Anthropic, Gemini or Bedrock request changes by a byte."""

from __future__ import annotations

import json
from urllib.parse import quote, unquote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxycheck.core.recording.redact import (
    REDACTED,
    REDACTED_TEXT,
    RedactionPolicy,
    credential_name,
    redact_body,
    redact_headers,
    redact_url,
)

POLICY = RedactionPolicy.default()
pytestmark = pytest.mark.timeout(60)

# --------------------------------------------------------------------------------------------
# Names

SECRET_NAMES = [
    "X-Auth-Token", "x-amz-security-token", "api_key", "apiKey", "access_token", "client_secret", "password",
    "passwd", "Authorization", "Proxy-Authorization", "x-api-key", "x-goog-api-key", "api-key", "Cookie",
    "Set-Cookie", "refresh_token", "id_token", "session-token", "X-Session-Token", "authToken", "XAuthToken",
    "apikey", "secret", "Ocp-Apim-Subscription-Key", "X-Amz-Signature", "X-Amz-Credential", "signature",
    "credentials", "authorization_token", "aws_secret_access_key", "private_key", "x-csrf-token",
]  # fmt: skip
LOOKALIKE_NAMES = [
    "max_tokens", "max_completion_tokens", "max_output_tokens", "maxOutputTokens", "max_new_tokens",
    "min_tokens", "prompt_tokens", "completion_tokens", "total_tokens", "input_tokens", "output_tokens",
    "cache_read_input_tokens", "cache_creation_input_tokens", "reasoning_tokens", "budget_tokens",
    "thinkingBudget", "cache_control", "prompt_cache_key", "anthropic-version", "anthropic-beta",
    "anthropic_version", "x-stainless-retry-count", "x-stainless-package-version", "x-stainless-os",
    "x-stainless-helper-method", "Idempotency-Key", "x-ratelimit-remaining-tokens", "x-ratelimit-limit-tokens",
    "x-ratelimit-reset-tokens", "anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset", "stop_token_ids", "token_type", "skip_special_tokens",
    "totalTokenCount", "promptTokenCount", ":authority", "x-amz-content-sha256", "X-Amz-SignedHeaders",
    "x-amz-date", "keep-alive", "content-type", "x-request-id", "user-agent", "openai-beta", "x-goog-api-client",
    "sec-websocket-key", "api-version", "authority", "keywords", "tokenizer",
]  # fmt: skip


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_credential_names_are_recognized(name: str) -> None:
    assert credential_name(name)


@pytest.mark.parametrize("name", LOOKALIKE_NAMES)
def test_names_that_only_look_like_a_credential_are_not(name: str) -> None:
    assert not credential_name(name)


def test_credential_headers_are_redacted_and_the_sdk_headers_kept() -> None:
    headers = [("X-Auth-Token", "t1"), ("x-amz-security-token", "t2"), ("X-Amz-Date", "20250101T000000Z"),
               ("anthropic-version", "2023-06-01"), ("x-stainless-retry-count", "0"),
               ("x-ratelimit-remaining-tokens", "9000")]  # fmt: skip
    out, removed = redact_headers(headers, POLICY)
    assert out == (("X-Auth-Token", REDACTED), ("x-amz-security-token", REDACTED), *headers[2:])
    assert removed == ["header:x-auth-token", "header:x-amz-security-token"]


# --------------------------------------------------------------------------------------------
# Real request bodies: nothing that is not a credential changes

OPENAI_CHAT = {
    "model": "gpt-4o-2024-08-06",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "My password is hunter2; what's the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "login", "arguments": "{\"username\":\"bob\",\"password\":\"hunter2\",\"api_key\":\"k\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"token\": \"from-the-tool\"}"},
    ],
    "tools": [{"type": "function", "function": {"name": "login", "description": "Log in", "strict": True,
        "parameters": {"type": "object", "properties": {"username": {"type": "string"},
                       "password": {"type": "string", "description": "the user's password"},
                       "api_key": {"type": "string"}, "key": {"type": "integer"}},
                       "required": ["username", "password"], "additionalProperties": False}}}],
    "response_format": {"type": "json_schema", "json_schema": {"name": "Creds", "strict": True, "schema": {
        "type": "object", "properties": {"token": {"type": "string"}, "secret": {"type": "string"}}}}},
    "max_completion_tokens": 512, "max_tokens": 512, "temperature": 0.2, "top_p": 1e0, "n": 1, "seed": 7,
    "stream": True, "stream_options": {"include_usage": True}, "parallel_tool_calls": False,
    "prompt_cache_key": "agent-42", "safety_identifier": "u-1", "user": "u-1", "service_tier": "auto",
    "reasoning_effort": "low", "logit_bias": {"50256": -100}, "metadata": {"run": "r1"},
}  # fmt: skip
OPENAI_RESPONSES = {
    "model": "gpt-5", "instructions": "Be brief.", "previous_response_id": "resp_1",
    "input": [{"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA...", "summary": []},
              {"type": "function_call_output", "call_id": "c1", "output": "{\"access_token\":\"x\"}"},
              {"role": "user", "content": [{"type": "input_text", "text": "go"}]}],
    "include": ["reasoning.encrypted_content"], "max_output_tokens": 2048, "store": False,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object",
             "properties": {"password": {"type": "string"}}}}, "verbosity": "low"},
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {
        "signature": {"type": "string"}}}}],
}  # fmt: skip
ANTHROPIC = {
    "model": "claude-sonnet-4-20250514", "max_tokens": 4096, "stream": True,
    "system": [{"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}}],
    "thinking": {"type": "enabled", "budget_tokens": 2048},
    "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Let me think", "signature": "EqQBCkgIARABGAIiQL+base64=="},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            {"type": "tool_use", "id": "toolu_1", "name": "login", "input": {"password": "p", "token": "t"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "ok"}], "cache_control": {"type": "ephemeral"}}]},
    ],
    "tools": [{"name": "login", "description": "d", "input_schema": {"type": "object", "properties": {
        "password": {"type": "string"}, "token": {"type": "string"}}, "required": ["password"]},
        "cache_control": {"type": "ephemeral"}}],
    "tool_choice": {"type": "auto"}, "metadata": {"user_id": "u-1"}, "stop_sequences": ["\n\nHuman:"],
    "temperature": 1, "top_k": 40,
    "context_management": {"edits": [{"type": "clear_tool_uses_20250919",
                                      "trigger": {"type": "input_tokens", "value": 30000}}]},
}  # fmt: skip
GEMINI = {
    "contents": [{"role": "user", "parts": [{"text": "hi"}]},
                 {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"apiKey": "x"}},
                                              "thoughtSignature": "CiQBVKhc7..."}]}],
    "systemInstruction": {"parts": [{"text": "sys"}]},
    "tools": [{"functionDeclarations": [{"name": "f", "description": "d", "parameters": {
        "type": "OBJECT", "properties": {"apiKey": {"type": "STRING"}}, "required": ["apiKey"]}}]}],
    "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
    "generationConfig": {"maxOutputTokens": 1024, "temperature": 0.7, "topP": 0.95, "topK": 40, "candidateCount": 1,
                         "responseMimeType": "application/json", "responseSchema": {"type": "OBJECT", "properties": {
                             "token": {"type": "STRING"}}}, "thinkingConfig": {"thinkingBudget": 512,
                                                                             "includeThoughts": True}},
    "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
    "cachedContent": "cachedContents/abc123",
}  # fmt: skip
BEDROCK_CONVERSE = {
    "messages": [{"role": "user", "content": [{"text": "hi"}]}],
    "system": [{"text": "sys"}],
    "inferenceConfig": {"maxTokens": 512, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]},
    "toolConfig": {"tools": [{"toolSpec": {"name": "f", "description": "d", "inputSchema": {"json": {
        "type": "object", "properties": {"secret": {"type": "string"}}}}}}]},
    "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
}  # fmt: skip
BEDROCK_INVOKE = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 300,
                  "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
SGLANG = {"text": "hi", "input_ids": [1, 2], "sampling_params": {"max_new_tokens": 16, "stop_token_ids": [2],
          "skip_special_tokens": True}, "return_logprob": False, "token_ids_logprob": [5]}  # fmt: skip

REAL_BODIES = {"openai-chat": OPENAI_CHAT, "openai-responses": OPENAI_RESPONSES, "anthropic": ANTHROPIC,
               "gemini": GEMINI, "bedrock-converse": BEDROCK_CONVERSE, "bedrock-invoke": BEDROCK_INVOKE,
               "sglang": SGLANG}  # fmt: skip


@pytest.mark.parametrize("spacing", [(",", ":"), (", ", ": ")], ids=["compact", "spaced"])
@pytest.mark.parametrize("name", sorted(REAL_BODIES))
def test_real_requests_without_credentials_are_kept_byte_for_byte(name: str, spacing: tuple[str, str]) -> None:
    raw = json.dumps(REAL_BODIES[name], separators=spacing).encode()
    assert redact_body(raw, POLICY) == (raw, [])


def test_credential_fields_anywhere_outside_the_conversation_are_redacted_in_place() -> None:
    doc = {**ANTHROPIC, "mcp_servers": [{"type": "url", "url": "https://mcp", "name": "m",
                                         "authorization_token": "mcp-secret"}],
           "metadata": {"user_id": "u-1", "api_key": "k1", "apiKey": "k2", "count_key": 3}}  # fmt: skip
    doc["client_secret"], doc["password"], doc["access_token"] = "cs", "pw", "at"
    raw = json.dumps(doc, indent=1).encode()
    new, removed = redact_body(raw, POLICY)
    assert set(removed) == {"body:access_token", "body:client_secret", "body:mcp_servers.authorization_token",
                            "body:metadata.api_key", "body:metadata.apiKey", "body:password"}  # fmt: skip
    for secret in (b"mcp-secret", b'"k1"', b'"k2"', b'"cs"', b'"pw"', b'"at"'):
        assert secret not in new
    got = json.loads(new)
    assert got["metadata"] == {"user_id": "u-1", "api_key": REDACTED_TEXT, "apiKey": REDACTED_TEXT, "count_key": 3}
    # Every byte but the redacted values is as it was: put the values back and the bodies match.
    restored = new
    for secret in sorted(("mcp-secret", "k1", "k2", "cs", "pw", "at"), key=lambda v: raw.index(json.dumps(v).encode())):
        restored = restored.replace(json.dumps(REDACTED_TEXT).encode(), json.dumps(secret).encode(), 1)
    assert json.loads(restored) == doc and len(restored) == len(raw)


def test_the_conversation_and_schemas_are_never_touched() -> None:
    """The prompt, tool-call arguments, thinking signatures and a schema's `password` property are
    what the model sees: a replay must send them as recorded."""
    for doc in (OPENAI_CHAT, ANTHROPIC, GEMINI, OPENAI_RESPONSES, BEDROCK_CONVERSE):
        raw = json.dumps(doc).encode()
        assert redact_body(raw, POLICY)[0] == raw


def test_values_that_are_not_strings_are_kept() -> None:
    raw = b'{"key": 3, "token": true, "secret": null, "password": 1.50, "api_key": "s"}'
    new, removed = redact_body(raw, POLICY)
    assert new == b'{"key": 3, "token": true, "secret": null, "password": 1.50, "api_key": "[redacted]"}'
    assert removed == ["body:api_key"]


def test_every_string_under_a_credential_named_object_is_redacted() -> None:
    raw = b'{"credentials": {"user": "bob", "pass": "x", "n": 2}, "api_keys": ["a", "b"]}'
    new, _ = redact_body(raw, POLICY)
    assert json.loads(new) == {"credentials": {"user": REDACTED_TEXT, "pass": REDACTED_TEXT, "n": 2},
                               "api_keys": [REDACTED_TEXT, REDACTED_TEXT]}  # fmt: skip


def test_escapes_numbers_and_duplicate_keys_elsewhere_stay_as_sent() -> None:
    raw = '{"a":"\\u00e9","b":1e0,"token":"x","token":"y","c":[1.0, -0],"d":"é"}'.encode()
    new, removed = redact_body(raw, POLICY)
    assert new == '{"a":"\\u00e9","b":1e0,"token":"[redacted]","token":"[redacted]","c":[1.0, -0],"d":"é"}'.encode()
    assert removed == ["body:token"]


def test_the_default_rule_can_be_turned_off_with_redaction() -> None:
    raw = b'{"password": "p"}'
    assert redact_body(raw, RedactionPolicy.off()) == (raw, [])


# --------------------------------------------------------------------------------------------
# Query strings: only the redacted values change

def test_redacting_a_query_secret_keeps_every_other_byte() -> None:
    url = "https://h/v1/models/m:streamGenerateContent?alt=sse&q=a%20b&r=a+b&s=1;2&key=AIza&t=%7E&X-Amz-Signature=ab#f"
    new, removed = redact_url(url, POLICY)
    assert new == ("https://h/v1/models/m:streamGenerateContent?alt=sse&q=a%20b&r=a+b&s=1;2&key=[redacted]&t=%7E"
                   "&X-Amz-Signature=[redacted]#f")  # fmt: skip
    assert removed == ["query:key", "query:x-amz-signature"]


_NAME = st.text(st.characters(codec="utf-8", exclude_characters="&=#"), max_size=8)
_VALUE = st.text(st.characters(codec="utf-8", exclude_characters="&#"), max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_NAME, st.booleans(), _VALUE, st.booleans()), max_size=8))
def test_non_redacted_query_parameters_are_byte_identical(params: list[tuple[str, bool, str, bool]]) -> None:
    """For any query (parameters raw or percent-encoded, some named like a credential), the
    parameters that are not redacted keep their bytes and their order."""
    parts = []
    for name, encode, value, secret in params:
        name = ("api_key" if secret else name)
        raw_name, raw_value = (quote(name, safe=""), quote(value, safe="")) if encode else (name, value)
        parts.append(f"{raw_name}={raw_value}")
    query = "&".join(parts)
    new, _ = redact_url(f"http://h/p?{query}", POLICY)
    assert new.startswith("http://h/p?")
    got = new[len("http://h/p?"):].split("&") if parts else []
    assert len(got) == len(parts)
    for before, after in zip(parts, got):
        name = before.partition("=")[0]
        if after != before:
            assert after == f"{name}={REDACTED_TEXT}"
            assert credential_name(unquote_plus(name)) or unquote_plus(name).lower() in POLICY.query
        else:
            assert not (credential_name(unquote_plus(name)) or unquote_plus(name).lower() in POLICY.query)


_KEYS = st.sampled_from(["a", "token", "max_tokens", "api_key", "x", "password", "n", "\u00e9", "key"])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=20,
)


def _expected(node: object, secret: bool = False) -> object:
    """What the name rule makes of a document outside the conversation (no content keys here)."""
    if isinstance(node, dict):
        return {k: _expected(v, secret or credential_name(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_expected(v, secret) for v in node]
    return REDACTED_TEXT if secret and isinstance(node, str) else node


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _JSON, max_size=5), st.sampled_from([None, 1]), st.booleans())
def test_in_place_body_redaction_matches_the_rule_for_any_document(doc: dict, indent: int | None, ascii_: bool) -> None:
    raw = json.dumps(doc, indent=indent, ensure_ascii=ascii_).encode()
    new, removed = redact_body(raw, POLICY)
    assert json.loads(new) == _expected(doc)
    assert (new == raw) == (not removed)


def test_a_form_encoded_body_loses_its_secrets_and_keeps_every_other_byte() -> None:
    body = b"grant_type=password&username=ann&password=hunter%202&client_secret=s3cr3t&scope=a+b%2Fc&max_tokens=9"
    redacted, removed = redact_body(body, RedactionPolicy.default())
    assert redacted == (b"grant_type=password&username=ann&password=[redacted]&client_secret=[redacted]"
                        b"&scope=a+b%2Fc&max_tokens=9")  # fmt: skip
    assert removed == ["body:password", "body:client_secret"]
    # Prose with an "=" in it is no form: nothing is touched.
    for text in (b"password = hunter2", b"key=1\nsecond line", "clé=ß".encode()):
        assert redact_body(text, RedactionPolicy.default()) == (text, [])
