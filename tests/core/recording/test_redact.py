"""Redaction rules, bytes in and bytes out (the writer applies them before anything is stored)."""

from __future__ import annotations

import json

from proxycheck.core.recording.redact import REDACTED, REDACTED_TEXT, RedactionPolicy, redact_body, redact_headers, redact_url

POLICY = RedactionPolicy.default()


def test_header_names_match_in_any_case_and_are_listed_once() -> None:
    headers, removed = redact_headers([("X-Api-Key", "k1"), ("x-api-key", "k2"), ("Accept", "a")], POLICY)
    assert headers == (("X-Api-Key", REDACTED), ("x-api-key", REDACTED), ("Accept", "a"))
    assert removed == ["header:x-api-key"]


def test_query_values_are_replaced_and_other_parameters_kept() -> None:
    url, removed = redact_url("https://h/v1/models/x:generate?alt=sse&Key=AIza-secret&api_key=2", POLICY)
    assert "AIza-secret" not in url and "=2" not in url
    assert url.startswith("https://h/v1/models/x:generate?alt=sse&Key=")
    assert url.count(REDACTED_TEXT) == 2
    assert removed == ["query:key", "query:api_key"]


def test_urls_without_secrets_are_kept_exactly() -> None:
    for url in ["http://h/v1/chat/completions", "http://h/p?b=2&a=1&a=3", "http://h/p?x=%20"]:
        assert redact_url(url, POLICY) == (url, [])


def test_userinfo_is_dropped() -> None:
    assert redact_url("http://user:pass@h:8080/p", POLICY) == ("http://h:8080/p", ["url:userinfo"])


def test_body_paths_reach_into_lists_and_leave_other_bodies_byte_exact() -> None:
    policy = POLICY.extended(body_paths=["metadata.api_key", "messages.secret"])
    raw = json.dumps({"metadata": {"api_key": "k"}, "messages": [{"secret": "s", "content": "c"}, {"content": "d"}]}).encode()
    new, removed = redact_body(raw, policy)
    doc = json.loads(new)
    assert doc["metadata"]["api_key"] == REDACTED_TEXT and doc["messages"][0]["secret"] == REDACTED_TEXT
    assert doc["messages"][0]["content"] == "c"
    assert removed == ["body:metadata.api_key", "body:messages.secret"]
    untouched = b'{ "model" : "m" }'
    assert redact_body(untouched, policy) == (untouched, [])
    assert redact_body(b"\xff not json", policy) == (b"\xff not json", [])


def test_policy_off_redacts_nothing() -> None:
    off = RedactionPolicy.off()
    assert redact_headers([("Authorization", "x")], off) == ((("Authorization", "x"),), [])
    assert redact_url("http://u:p@h/?key=1", off) == ("http://u:p@h/?key=1", [])


def test_a_body_too_deep_to_walk_is_not_kept_at_all() -> None:
    policy = POLICY.extended(body_paths=["secret"])
    deep = b'{"secret": "s3", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    new, removed = redact_body(deep, policy)
    assert b"s3" not in new and removed == ["body:*"]
