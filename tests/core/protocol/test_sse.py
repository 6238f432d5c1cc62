"""Tests for proxycheck.core.protocol.sse, h11 style: bytes (and times) in, items out."""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proxycheck.core.protocol.sse as sse_module
from proxycheck.core.protocol.sse import SSEComment, SSEEvent, SSEItem, SSEParser, parse

WIRE = Path(__file__).resolve().parents[2] / "fixtures" / "wire"
WIRE_FILES = sorted(WIRE.glob("*.sse"))
BOM = b"\xef\xbb\xbf"


def feed_all(
    chunks: list[bytes], times: list[float] | None = None, close_time: float = 0.0
) -> list[SSEItem]:
    """Feed `chunks` (at `times`, default 0.0) then close: every item, in order."""
    parser = SSEParser()
    items: list[SSEItem] = []
    for i, chunk in enumerate(chunks):
        items += parser.feed(chunk, times[i] if times else 0.0)
    items += parser.close(close_time)
    return items


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut at the given positions (any order, duplicates allowed: empty chunks)."""
    bounds = [0, *sorted(min(max(c, 0), len(data)) for c in cuts), len(data)]
    return [data[a:b] for a, b in pairwise(bounds)]


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def events(items: list[SSEItem]) -> list[SSEEvent]:
    return [item for item in items if isinstance(item, SSEEvent)]


def ev(
    data: str,
    start: int,
    end: int,
    *,
    type: str = "message",
    id: str | None = None,
    retry: int | None = None,
    time: float = 0.0,
    complete: bool = True,
) -> SSEEvent:
    return SSEEvent(type, data, id, retry, start, end, time, complete)


# --- line ends -------------------------------------------------------------------------------


def test_single_event_lf() -> None:
    assert parse(b"data: hello\n\n") == [ev("hello", 0, 13)]


@pytest.mark.parametrize("nl", [b"\n", b"\r", b"\r\n"])
def test_each_line_end(nl: bytes) -> None:
    stream = b"event: e" + nl + b"data: x" + nl + nl + b"data: y" + nl + nl
    first_end = 8 + 7 + 3 * len(nl)
    assert parse(stream) == [
        ev("x", 0, first_end, type="e"),
        ev("y", first_end, len(stream)),
    ]


def test_mixed_line_ends_in_one_stream() -> None:
    stream = b"event: a\rdata: 1\r\n\ndata: 2\n\r"
    assert parse(stream) == [ev("1", 0, 19, type="a"), ev("2", 19, 28)]


def test_cr_at_chunk_end_then_lf_is_one_line_end() -> None:
    # "data: x\r\n\r\n" cut right after each CR: two CRLFs, so one data line and one blank line.
    chunks = [b"data: x\r", b"\n\r", b"\n"]
    assert feed_all(chunks, [1.0, 2.0, 3.0]) == [ev("x", 0, 11, time=3.0)]
    # One blank line only: no second dispatch, and the next event is intact.
    assert feed_all([b"data: x\r", b"\n", b"\r", b"\ndata: y\r", b"\n\r\n"]) == [
        ev("x", 0, 11),
        ev("y", 11, 22),
    ]


def test_lone_cr_as_last_byte_waits_for_the_next_byte() -> None:
    parser = SSEParser()
    # The final CR might be the first half of a CRLF, so the blank line is not complete yet.
    assert parser.feed(b"data: x\r\r", 1.0) == []
    assert parser.pending == 9
    assert parser.feed(b"data: y\n\n", 2.0) == [ev("x", 0, 9, time=2.0), ev("y", 9, 18, time=2.0)]
    # At close nothing can follow: the CR ends its line alone.
    assert parser.feed(b"data: z\r\r", 3.0) == []
    assert parser.close(4.0) == [ev("z", 18, 27, time=4.0)]


def test_crlf_split_lines_keep_their_offsets() -> None:
    stream = b": c\r\ndata: 1\r\n\r\n"
    expected = [SSEComment("c", 0, 5, 0.0), ev("1", 5, 16)]
    assert parse(stream) == expected
    assert feed_all(bytewise(stream)) == expected


# --- BOM and UTF-8 ---------------------------------------------------------------------------


def test_bom_skipped_but_counted_in_offsets() -> None:
    assert parse(BOM + b"data: x\n\n") == [ev("x", 3, 12)]


@pytest.mark.parametrize("cut", [1, 2, 3, 4])
def test_bom_split_across_chunks(cut: int) -> None:
    stream = BOM + b"data: x\n\n"
    assert feed_all([stream[:cut], stream[cut:]]) == [ev("x", 3, 12)]
    assert feed_all(bytewise(stream)) == [ev("x", 3, 12)]


def test_bom_only_at_stream_start() -> None:
    # A second BOM is text: it makes the field name "\ufeffdata", an unknown field.
    assert parse(BOM + BOM + b"data: x\n\n") == []
    assert parse(b"data: a\n\n" + BOM + b"data: b\n\n") == [ev("a", 0, 9)]


def test_bom_prefix_that_is_not_a_bom() -> None:
    # EF BB then "d": not a BOM, so those bytes are (invalid) text of the first line.
    assert parse(b"\xef\xbbdata: x\n\ndata: y\n\n") == [ev("y", 11, 20)]
    # A stream shorter than a BOM that looks like its start: text, an unterminated line.
    parser = SSEParser()
    assert parser.feed(b"\xef\xbb", 1.0) == []
    assert parser.pending == 2
    assert parser.close(2.0) == [ev("", 0, 2, time=2.0, complete=False)]


def test_utf8_split_inside_multibyte_characters() -> None:
    text = "héllo € 𝄞 日本"
    stream = b"data: " + text.encode() + b"\n\n"
    for cut in range(len(stream) + 1):
        assert feed_all([stream[:cut], stream[cut:]]) == [ev(text, 0, len(stream))]
    assert feed_all(bytewise(stream)) == [ev(text, 0, len(stream))]


def test_invalid_utf8_is_replaced() -> None:
    assert parse(b"data: a\xffb\xe2\x82\n\n") == [ev("a\ufffdb\ufffd", 0, 13)]
    assert parse(b"event: \xc3\ndata: x\n\n") == [ev("x", 0, 18, type="\ufffd")]


# --- fields ----------------------------------------------------------------------------------


def test_data_with_and_without_space() -> None:
    assert [e.data for e in events(parse(b"data:x\n\ndata: x\n\ndata:  x\n\n"))] == ["x", "x", " x"]


def test_multi_line_data_joined_with_lf() -> None:
    assert events(parse(b"data: a\ndata: b\ndata: c\n\n"))[0].data == "a\nb\nc"
    # Only the last LF is removed: an empty last data line leaves a trailing "\n".
    assert events(parse(b"data: a\ndata:\n\n"))[0].data == "a\n"


def test_no_colon_line_is_field_name_with_empty_value() -> None:
    assert parse(b"data\n\n") == [ev("", 0, 6)]
    assert parse(b"data\ndata\ndata: x\n\n") == [ev("\n\nx", 0, 19)]


def test_unknown_field_ignored_but_starts_the_block() -> None:
    assert parse(b"foo: bar\ndata: x\n\n") == [ev("x", 0, 18)]
    assert parse(b"foo: bar\nDATA: x\n\n") == []  # field names are case-sensitive


def test_event_type() -> None:
    assert events(parse(b"event: delta\ndata: x\n\n"))[0].type == "delta"
    assert events(parse(b"event:\ndata: x\n\n"))[0].type == "message"
    assert events(parse(b"event: a:b\ndata: x\n\n"))[0].type == "a:b"
    # The type buffer is reset at every blank line, dispatched or not.
    assert [
        e.type for e in events(parse(b"event: x\n\ndata: y\n\nevent: z\ndata: 1\n\ndata: 2\n\n"))
    ] == [
        "message",
        "z",
        "message",
    ]


def test_empty_data_is_not_dispatched() -> None:
    assert parse(b"event: x\n\n") == []
    assert parse(b"retry: 5\n\n\n\n") == []
    assert parse(b"\n\n\ndata: y\n\n") == [ev("y", 3, 12)]


def test_id_persists_and_nul_is_ignored() -> None:
    stream = (
        b"id: 1\ndata: a\n\n"  # id 1
        b"data: b\n\n"  # still 1
        b"id: 2\n\n"  # no dispatch, but the buffer is now 2
        b"data: c\n\n"
        b"id: x\x00y\ndata: d\n\n"  # contains NUL: ignored
        b"id\ndata: e\n\n"  # no colon: set to ""
    )
    assert [(e.data, e.id) for e in events(parse(stream))] == [
        ("a", "1"),
        ("b", "1"),
        ("c", "2"),
        ("d", "2"),
        ("e", ""),
    ]
    assert events(parse(b"data: a\n\n"))[0].id is None


def test_retry_digits_only_and_per_block() -> None:
    stream = (
        b"retry: 3000\ndata: a\n\n"
        b"data: b\n\n"  # not carried over
        b"retry: 3s\ndata: c\n\n"
        b"retry: \xef\xbc\x93\ndata: d\n\n"  # FULLWIDTH DIGIT THREE is not an ASCII digit
        b"retry:\ndata: e\n\n"
        b"retry: -1\ndata: f\n\n"
        b"retry: 10\nretry: x\ndata: g\n\n"  # the invalid one is ignored, 10 stays
        b"retry: 007\ndata: h\n\n"
    )
    assert [(e.data, e.retry) for e in events(parse(stream))] == [
        ("a", 3000),
        ("b", None),
        ("c", None),
        ("d", None),
        ("e", None),
        ("f", None),
        ("g", 10),
        ("h", 7),
    ]


def test_absurdly_long_retry_is_ignored_not_raised() -> None:
    [event] = events(parse(b"retry: " + b"9" * 5000 + b"\ndata: x\n\n"))
    assert event.retry is None


# --- comments --------------------------------------------------------------------------------


def test_comments() -> None:
    assert parse(b": ping\n:no space\n:  two\n:\n") == [
        SSEComment("ping", 0, 7, 0.0),
        SSEComment("no space", 7, 17, 0.0),
        SSEComment(" two", 17, 24, 0.0),
        SSEComment("", 24, 26, 0.0),
    ]


def test_comment_inside_block_keeps_event_start() -> None:
    assert parse(b"data: a\n: c\ndata: b\n\n") == [SSEComment("c", 8, 12, 0.0), ev("a\nb", 0, 21)]
    assert parse(b": c\ndata: a\n\n") == [SSEComment("c", 0, 4, 0.0), ev("a", 4, 13)]


# --- end of stream ---------------------------------------------------------------------------


def test_unterminated_last_event() -> None:
    assert feed_all([b"data: a\n\ndata: b"], [1.0], close_time=9.0) == [
        ev("a", 0, 9, time=1.0),
        ev("b", 9, 16, time=9.0, complete=False),
    ]
    assert parse(b"data: b\n") == [ev("b", 0, 8, complete=False)]
    assert parse(b"event: x\n") == [ev("", 0, 9, type="x", complete=False)]
    assert parse(b"id: 3") == [ev("", 0, 5, id="3", complete=False)]
    assert parse(b"retry: zz\n") == [ev("", 0, 10, complete=False)]
    # A partial last line opens a block whatever its field name.
    assert parse(b"data: a\n\nfoo") == [ev("a", 0, 9), ev("", 9, 12, id=None, complete=False)]


def test_end_of_stream_without_open_block() -> None:
    assert parse(b"") == []
    assert parse(b"data: a\n\n\n\n") == [ev("a", 0, 9)]
    assert parse(b"foo: bar\n") == []  # terminated unknown field lines only: nothing to report
    assert parse(b"data: a\n\n: bye") == [ev("a", 0, 9), SSEComment("bye", 9, 14, 0.0)]
    assert parse(b"data: a\n: bye") == [
        SSEComment("bye", 8, 13, 0.0),
        ev("a", 0, 13, complete=False),
    ]


def test_feed_after_close_raises() -> None:
    parser = SSEParser()
    parser.feed(b"data: a\n\n", 0.0)
    assert parser.close(1.0) == []
    assert parser.close(2.0) == []
    with pytest.raises(ValueError):
        parser.feed(b"data: b\n\n", 3.0)


# --- offsets, times, pending -----------------------------------------------------------------


def test_offsets_times_and_pending_exact() -> None:
    # Lines: ": hi\r\n" 0-6, "data: 1\r\n" 6-15, "\r\n" 15-17,
    #        "event: e\n" 17-26, "data: 2\n" 26-34, "\n" 34-35.
    parser = SSEParser()
    assert parser.feed(b": hi\r", 1.0) == []
    assert (parser.offset, parser.pending) == (5, 5)
    assert parser.feed(b"\ndata: 1\r\n\r", 2.0) == [SSEComment("hi", 0, 6, 2.0)]
    assert (parser.offset, parser.pending) == (16, 10)  # the open block starts at 6
    assert parser.feed(b"\nevent: e\ndata: ", 3.0) == [ev("1", 6, 17, time=3.0)]
    assert (parser.offset, parser.pending) == (32, 15)
    assert parser.feed(b"", 3.5) == []
    assert parser.feed(b"2\n\n", 4.0) == [ev("2", 17, 35, type="e", time=4.0)]
    assert (parser.offset, parser.pending) == (35, 0)
    assert parser.close(5.0) == []
    assert (parser.offset, parser.pending) == (35, 0)


def test_huge_line_in_tiny_chunks() -> None:
    # Must be linear: a quadratic rescan of 1 MB byte by byte would not finish in time.
    payload = b"x" * 1_000_000
    parser = SSEParser()
    parser.feed(b"data: ", 0.0)
    for i in range(0, len(payload), 7):
        assert parser.feed(payload[i : i + 7], 0.0) == []
    assert parser.pending == 6 + len(payload)
    [event] = parser.feed(b"\n\n", 1.0)
    assert (
        isinstance(event, SSEEvent)
        and len(event.data) == len(payload)
        and event.end == parser.offset
    )


# --- real captures ---------------------------------------------------------------------------


def test_wire_fixtures_present_and_intact() -> None:
    readme = (WIRE / "README.md").read_text()
    sums = dict(
        (name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+\.sse)$", readme, re.M)
    )
    assert sorted(sums) == [path.name for path in WIRE_FILES] and len(sums) >= 11
    for path in WIRE_FILES:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sums[path.name], path.name


@pytest.mark.parametrize("path", WIRE_FILES, ids=lambda p: p.stem)
def test_wire_capture(path: Path) -> None:
    raw = path.read_bytes()
    items = parse(raw)
    assert feed_all(bytewise(raw)) == items
    # Every event in these files is one `data:` line, optionally preceded by an `event:` line,
    # so the expected events can be read off the lines independently of the parser.
    lines = raw.decode().split("\n")
    expected_data = [
        line.removeprefix("data:").removeprefix(" ") for line in lines if line.startswith("data:")
    ]
    expected_types = [
        line.removeprefix("event:").strip() for line in lines if line.startswith("event:")
    ]
    got = events(items)
    assert len(got) == len(items) == len(expected_data) == raw.count(b"\n\n")
    assert [e.data for e in got] == expected_data
    if expected_types:
        assert [e.type for e in got] == expected_types
    else:
        assert {e.type for e in got} == {"message"}
    assert all(e.complete and e.id is None and e.retry is None for e in got)
    assert got[0].start == 0 and got[-1].end == len(raw)
    assert all(a.end == b.start for a, b in pairwise(got))
    for e in got:
        if e.data != "[DONE]":
            json.loads(e.data)


# --- properties ------------------------------------------------------------------------------

LINE_ENDS = st.sampled_from(["\n", "\r", "\r\n"])
# Field values: any text without line ends (a CR or LF would end the line).
VALUES = st.text(
    st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12
)


@st.composite
def sse_lines(draw: st.DrawFn) -> str:
    """One line of an SSE stream, with its line end: a field, a comment or a blank line."""
    kind = draw(st.sampled_from(["data", "event", "id", "retry", "foo", ":", "", "bare"]))
    end = draw(LINE_ENDS)
    if kind == "":
        return end
    if kind == "bare":
        return draw(st.sampled_from(["data", "event", "id", "retry"])) + end
    value = draw(st.one_of(VALUES, st.from_regex(r"\A[0-9]{1,4}\Z")))
    sep = draw(st.sampled_from([":", ": ", ":  "]))
    return (":" + value if kind == ":" else kind + sep + value) + end


@st.composite
def sse_streams(draw: st.DrawFn) -> bytes:
    """Mostly well-formed SSE (random fields, comments, line ends), spiked with raw bytes."""
    parts = [draw(st.sampled_from([b"", BOM, BOM[:2]]))]
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 9)) == 0:
            parts.append(draw(st.binary(max_size=8)))
        else:
            parts.append("".join(draw(st.lists(sse_lines(), min_size=1, max_size=5))).encode())
            parts.append(draw(LINE_ENDS).encode())  # usually dispatch
    return b"".join(parts)


@settings(max_examples=200, deadline=None)
@given(stream=sse_streams(), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_chunking_never_changes_items(stream: bytes, cuts: list[int]) -> None:
    whole = parse(stream)
    assert feed_all(split_at(stream, cuts)) == whole
    assert feed_all(bytewise(stream)) == whole


@settings(max_examples=300, deadline=None)
@given(stream=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=20))
def test_fuzz_arbitrary_bytes_keep_accounting_consistent(stream: bytes, cuts: list[int]) -> None:
    parser = SSEParser()
    items: list[SSEItem] = []
    fed = 0
    settled = 0  # offset - pending: never moves back, and new items start at or after it
    for t, chunk in enumerate(split_at(stream, cuts)):
        new = parser.feed(chunk, float(t))
        fed += len(chunk)
        assert parser.offset == fed
        assert 0 <= parser.pending <= parser.offset
        for item in new:
            assert settled <= item.start <= item.end <= parser.offset
            assert item.time == float(t)
        assert parser.offset - parser.pending >= settled
        settled = parser.offset - parser.pending
        items += new
    final = parser.close(99.0)
    assert all(settled <= item.start <= item.end == parser.offset for item in final)
    assert parser.pending == 0
    items += final
    assert [item.end for item in items] == sorted(item.end for item in items)
    assert all(isinstance(e, SSEComment) or e.complete for e in items[: len(items) - len(final)])
    assert [replace(item, time=0.0) for item in items] == parse(stream)


NO_NUL = st.text(
    st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)), max_size=10
)


@settings(max_examples=200, deadline=None)
@given(
    specs=st.lists(
        st.tuples(
            st.none() | NO_NUL.filter(bool),  # type; None: no event line
            st.text(
                st.characters(blacklist_characters="\r", blacklist_categories=("Cs",)), max_size=30
            ),
            st.none() | NO_NUL,  # id; None: no id line
        ),
        max_size=8,
    ),
    nl=LINE_ENDS,
)
def test_round_trip(specs: list[tuple[str | None, str, str | None]], nl: str) -> None:
    text = []
    expected = []
    last_id = None
    for type_, data, id_ in specs:
        if type_ is not None:
            text.append(f"event: {type_}{nl}")
        text.extend(f"data: {line}{nl}" for line in data.split("\n"))
        if id_ is not None:
            text.append(f"id: {id_}{nl}")
            last_id = id_
        text.append(nl)
        expected.append((type_ or "message", data, last_id))
    got = events(parse("".join(text).encode()))
    assert [(e.type, e.data, e.id) for e in got] == expected


# --- purity ----------------------------------------------------------------------------------


def test_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(sse_module.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= {"__future__", "collections", "dataclasses", "itertools", "typing"}
