"""Tests for proxycheck.core.testbed.ssefilter: bytes in, bytes out, whatever the chunking.

The oracle for the filter is the SSE parser run over the whole stream at once: the cut is the
end offset of the K-th event, the dropped bytes are the terminal events' ranges. Hypothesis
then checks that any chunking of any stream forwards exactly those bytes.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxycheck.core.protocol.sse import SSEEvent, parse
from proxycheck.core.testbed.ssefilter import (
    KEEPALIVE,
    SSEFilter,
    coin,
    draw,
    is_terminal,
    truncate_messages,
    turn_number,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
STREAMS = sorted([*(FIXTURES / "wire").glob("*.sse"), *(FIXTURES / "dialects").glob("*.sse")])

OPENAI = (
    b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    b": ping\n\n"
    b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'
    b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)
ANTHROPIC = (
    b'event: message_start\ndata: {"type":"message_start"}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta"}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta"}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


def run(flt: SSEFilter, chunks: list[bytes]) -> bytes:
    """Everything the filter forwards for these chunks, then the end of the stream."""
    return b"".join(flt.feed(c) for c in chunks) + flt.close()


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(min(max(c, 0), len(data)) for c in cuts), len(data)]
    return [data[a:b] for a, b in pairwise(bounds)]


def events_of(data: bytes) -> list[SSEEvent]:
    return [item for item in parse(data) if isinstance(item, SSEEvent)]


def cut_offset(data: bytes, k: int | None) -> int:
    """Where `cut_after=k` cuts `data`: the end of its k-th event (the whole stream if fewer)."""
    events = events_of(data)
    if k is None or k > len(events):
        return len(data)
    return events[k - 1].end if k else 0


def expected(data: bytes, k: int | None, drop: bool) -> bytes:
    """What the filter must forward of `data`, from the parser's view of the whole stream."""
    upto = cut_offset(data, k)
    return expected_dropped(data, upto) if drop else data[:upto]


def expected_dropped(data: bytes, upto: int | None = None) -> bytes:
    """`data` (or its first `upto` bytes) without the terminal events."""
    end = len(data) if upto is None else upto
    out, pos = [], 0
    for event in events_of(data):
        if event.start >= end:
            break
        if is_terminal(event):
            out.append(data[pos : event.start])
            pos = event.end
    out.append(data[pos:end])
    return b"".join(out)


# --------------------------------------------------------------------------------------------
# examples


def test_pass_forwards_every_chunk_unchanged() -> None:
    flt = SSEFilter()
    chunks = split_at(OPENAI, [3, 60, 61, 200])
    assert [flt.feed(c) for c in chunks] == chunks
    assert flt.close() == b""
    assert flt.events == 5 and not flt.cut_passed


def test_cut_forwards_the_first_k_events_and_withholds_the_rest() -> None:
    flt = SSEFilter(cut_after=2)
    out = run(flt, [OPENAI])
    assert out == OPENAI[: OPENAI.index(b": ping")]
    assert [e.data for e in events_of(out)][-1] == '{"choices":[{"delta":{"content":"a"}}]}'
    assert flt.cut_passed
    assert flt.withheld_bytes == len(OPENAI) - len(out)


def test_cut_forwards_bytes_as_they_come_until_the_cut() -> None:
    flt = SSEFilter(cut_after=2)
    first = OPENAI[:10]
    assert flt.feed(first) == first  # a partial first event is not held back
    assert not flt.cut_passed


def test_cut_passed_turns_true_with_the_chunk_that_completes_the_kth_event() -> None:
    flt = SSEFilter(cut_after=1)
    end = events_of(OPENAI)[0].end
    assert flt.feed(OPENAI[: end - 1]) == OPENAI[: end - 1]
    assert not flt.cut_passed
    assert flt.feed(OPENAI[end - 1 : end + 5]) == OPENAI[end - 1 : end]
    assert flt.cut_passed


def test_cut_after_zero_forwards_nothing() -> None:
    flt = SSEFilter(cut_after=0)
    assert flt.cut_passed
    assert run(flt, [b": hello\n\n", OPENAI]) == b""
    assert flt.withheld_bytes == len(OPENAI) + 9


def test_cut_beyond_the_stream_forwards_everything() -> None:
    flt = SSEFilter(cut_after=99)
    assert run(flt, [OPENAI]) == OPENAI
    assert not flt.cut_passed


def test_cut_at_the_last_event_withholds_only_what_follows() -> None:
    flt = SSEFilter(cut_after=5)
    assert run(flt, [OPENAI + b": trailing\n\n"]) == OPENAI
    assert flt.cut_passed


def test_keepalive_answers_each_withheld_chunk_with_one_comment() -> None:
    flt = SSEFilter(cut_after=2, keepalive=True)
    cut = events_of(OPENAI)[1].end
    chunks = split_at(OPENAI, [cut + 3, cut + 40, cut + 41])
    outs = [flt.feed(c) for c in chunks]
    assert outs[0] == OPENAI[:cut] + KEEPALIVE  # the chunk holding the cut withheld a tail too
    assert outs[1:] == [KEEPALIVE] * 3
    assert flt.close() == b""
    assert flt.keepalives_sent == 4


def test_keepalive_is_not_sent_before_the_cut() -> None:
    flt = SSEFilter(cut_after=2, keepalive=True)
    cut = events_of(OPENAI)[1].end
    assert flt.feed(OPENAI[:cut]) == OPENAI[:cut]  # the cut, and nothing withheld yet
    assert flt.keepalives_sent == 0
    assert flt.feed(b"data: more\n\n") == KEEPALIVE


def test_keepalive_comments_are_comments_to_a_parser() -> None:
    out = run(SSEFilter(cut_after=1, keepalive=True), split_at(OPENAI, [60, 80, 120]))
    items = parse(out)
    assert [type(i).__name__ for i in items] == ["SSEEvent"] + ["SSEComment"] * 4  # 4 chunks withheld bytes
    assert {i.text for i in items[1:]} == {"keep-alive"}


def test_drop_terminal_openai_done() -> None:
    flt = SSEFilter(drop_terminal=True)
    assert run(flt, [OPENAI]) == OPENAI[: -len(b"data: [DONE]\n\n")]
    assert flt.terminals_dropped == 1


def test_drop_terminal_anthropic_message_stop() -> None:
    out = run(SSEFilter(drop_terminal=True), [ANTHROPIC])
    assert [e.type for e in events_of(out)] == ["message_start", "content_block_delta", "message_delta"]
    assert out == ANTHROPIC[: ANTHROPIC.index(b"event: message_stop")]


def test_drop_terminal_responses_completed_and_typeless_json() -> None:
    stream = (
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta"}\n\n'
        b'event: response.completed\ndata: {"type":"response.completed"}\n\n'
        b'data: {"type":"message_stop"}\n\n'  # a server that leaves out the event: lines
        b'data: {"text":"message_stop is just a word here"}\n\n'
    )
    out = run(SSEFilter(drop_terminal=True), [stream])
    assert [e.data for e in events_of(out)] == [
        '{"type":"response.output_text.delta"}',
        '{"text":"message_stop is just a word here"}',
    ]


def test_drop_terminal_holds_an_open_event_until_it_is_known() -> None:
    flt = SSEFilter(drop_terminal=True)
    assert flt.feed(b"data: [DO") == b""
    assert flt.feed(b"NE]\n") == b""
    assert flt.feed(b"\ndata: x\n") == b""  # [DONE] is dropped; the next event is still open
    assert flt.feed(b"\n") == b"data: x\n\n"


def test_drop_terminal_drops_an_unterminated_done_at_the_end() -> None:
    flt = SSEFilter(drop_terminal=True)
    assert flt.feed(b"data: a\n\ndata: [DONE]") == b"data: a\n\n"
    assert flt.close() == b""
    assert flt.terminals_dropped == 1


def test_an_unterminated_last_event_is_forwarded_at_close() -> None:
    flt = SSEFilter(drop_terminal=True)
    assert flt.feed(b"data: a\n\ndata: b") == b"data: a\n\n"
    assert flt.close() == b"data: b"


def test_drop_terminal_with_cut() -> None:
    # The cut falls on the terminal itself: it is still dropped.
    flt = SSEFilter(cut_after=5, drop_terminal=True)
    assert run(flt, [OPENAI]) == OPENAI[: -len(b"data: [DONE]\n\n")]
    assert flt.cut_passed


def test_comments_and_crlf_pass_through_untouched() -> None:
    stream = b": hi\r\n\r\ndata: a\r\n\r\n:x\rdata: [DONE]\r\n\r\n"
    assert run(SSEFilter(drop_terminal=True), [stream]) == b": hi\r\n\r\ndata: a\r\n\r\n:x\r"


def test_feed_after_close_is_an_error_and_close_is_idempotent() -> None:
    flt = SSEFilter(cut_after=1)
    flt.close()
    assert flt.close() == b""
    with pytest.raises(ValueError):
        flt.feed(b"data: x\n\n")


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        SSEFilter(cut_after=-1)
    with pytest.raises(ValueError):
        SSEFilter(keepalive=True)


def test_is_terminal() -> None:
    def ev(data: str, type_: str = "message") -> SSEEvent:
        return SSEEvent(type_, data, None, None, 0, 0, 0.0)

    assert is_terminal(ev("[DONE]"))
    assert is_terminal(ev("{}", "message_stop"))
    assert is_terminal(ev('{"type":"response.completed"}'))
    assert not is_terminal(ev('{"type":"response.completed"}', "response.output_text.delta"))
    assert not is_terminal(ev('{"choices":[]}'))
    assert not is_terminal(ev("message_stop [not json"))


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: p.name)
def test_fixture_streams_any_mode(path: Path) -> None:
    data = path.read_bytes()
    n = len(events_of(data))
    halves = split_at(data, [len(data) // 3, len(data) // 2])
    assert run(SSEFilter(), halves) == data
    assert run(SSEFilter(drop_terminal=True), halves) == expected(data, None, True)
    for k in (0, 1, max(n // 2, 1), n, n + 1):
        assert run(SSEFilter(cut_after=k), halves) == expected(data, k, False)
        assert run(SSEFilter(cut_after=k, drop_terminal=True), halves) == expected(data, k, True)


# --------------------------------------------------------------------------------------------
# any chunking forwards the same bytes

_EOL = st.sampled_from([b"\n", b"\r\n", b"\r"])
_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=12)


@st.composite
def blocks(draw_: st.DrawFn) -> bytes:
    eol = draw_(_EOL)
    kind = draw_(st.sampled_from(["data", "done", "typed", "comment", "json_stop", "junk"]))
    if kind == "comment":
        return b":" + draw_(_TEXT).encode() + eol
    if kind == "junk":  # an unknown field: a block without data, which dispatches nothing
        return b"foo: " + draw_(_TEXT).encode() + eol + eol
    if kind == "done":
        return b"data: [DONE]" + eol + eol
    if kind == "json_stop":
        return b'data: {"type":"message_stop"}' + eol + eol
    lines = [b"data: " + draw_(_TEXT).encode() for _ in range(draw_(st.integers(1, 3)))]
    if kind == "typed":
        etype = draw_(st.sampled_from([b"message_stop", b"response.completed", b"content_block_delta"]))
        lines.insert(0, b"event: " + etype)
    return eol.join(lines) + eol + eol


@st.composite
def streams(draw_: st.DrawFn) -> bytes:
    body = b"".join(draw_(st.lists(blocks(), max_size=12)))
    if draw_(st.booleans()):  # an unterminated tail: a partial last line or event
        body += draw_(st.sampled_from([b"data: [DONE]", b"data: tail", b"data: x\n", b":c"]))
    return body


def chunkings(data: bytes) -> st.SearchStrategy[list[bytes]]:
    return st.lists(st.integers(0, len(data)), max_size=10).map(lambda cuts: split_at(data, cuts))


@given(st.data())
def test_any_chunking_forwards_the_same_bytes(data: st.DataObject) -> None:
    stream = data.draw(streams())
    chunks = data.draw(chunkings(stream))
    k = data.draw(st.one_of(st.none(), st.integers(0, 8)))
    drop = data.draw(st.booleans())
    assert run(SSEFilter(cut_after=k, drop_terminal=drop), chunks) == expected(stream, k, drop)


@given(st.data())
def test_keepalive_output_is_the_cut_plus_comments(data: st.DataObject) -> None:
    stream = data.draw(streams())
    chunks = data.draw(chunkings(stream))
    k = data.draw(st.integers(0, 6))
    flt = SSEFilter(cut_after=k, keepalive=True)
    out = run(flt, chunks)
    assert out == expected(stream, k, False) + KEEPALIVE * flt.keepalives_sent
    assert flt.keepalives_sent <= len([c for c in chunks if c])
    assert (flt.keepalives_sent > 0) == (flt.withheld_bytes > 0)


# --------------------------------------------------------------------------------------------
# request bodies and the coin


def chat(*roles: str) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": r, "content": r[0]} for r in roles]}).encode()


def test_turn_number() -> None:
    assert turn_number(chat("user")) == 1
    assert turn_number(chat("system", "user", "assistant", "tool", "assistant", "user")) == 3
    assert turn_number(b"not json") == 1
    assert turn_number(None) == 1
    assert turn_number(b"[1, 2]") == 1
    assert turn_number(b'{"messages": "x"}') == 1
    assert turn_number('{"messages": [{"role": "assistant"}, "junk"]}') == 2


def test_truncate_keeps_leading_system_messages_and_the_last_n() -> None:
    body = chat("system", "developer", "user", "assistant", "user", "assistant", "user")
    out = truncate_messages(body, 2)
    assert out is not None
    doc = json.loads(out)
    assert [m["role"] for m in doc["messages"]] == ["system", "developer", "assistant", "user"]
    assert doc["model"] == "m"
    assert turn_number(out) == 2


def test_truncate_leaves_short_or_foreign_bodies_alone() -> None:
    assert truncate_messages(chat("system", "user", "assistant"), 2) is None
    assert truncate_messages(b"not json", 1) is None
    assert truncate_messages(b'{"prompt": "x"}', 1) is None
    with pytest.raises(ValueError):
        truncate_messages(chat("user"), 0)


def test_truncate_keeps_unicode() -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "é"}, {"role": "user", "content": "✓"}]})
    assert truncate_messages(body, 1) == '{"messages":[{"role":"user","content":"✓"}]}'.encode()


def test_coin_is_deterministic_and_fair_enough() -> None:
    assert [coin(0.5, 7, i) for i in range(50)] == [coin(0.5, 7, i) for i in range(50)]
    assert [coin(0.5, 7, i) for i in range(50)] != [coin(0.5, 8, i) for i in range(50)]
    hits = sum(coin(0.3, 1, i) for i in range(4000))
    assert 1000 < hits < 1400  # fixed by the hash: no randomness in this test
    assert all(coin(1.0, 1, i) for i in range(100))
    assert not any(coin(0.0, 1, i) for i in range(100))
    assert all(0.0 <= draw(s, i) < 1.0 for s in range(3) for i in range(100))


def test_turn_number_takes_a_parsed_body() -> None:
    assert turn_number(json.loads(chat("user", "assistant", "user"))) == 2
    assert turn_number({"messages": []}) == 1
