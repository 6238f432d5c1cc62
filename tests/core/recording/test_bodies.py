"""Request bodies cut into pieces: byte-exact round trips and message-level deduplication."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxycheck.core.recording import bodies
from proxycheck.core.recording.bodies import PieceRef


def rejoin(split: bodies.SplitBody) -> bytes:
    return bodies.join_body(split.body, split.pieces.__getitem__)


def chat_body(messages: list[dict], **extra) -> bytes:
    return json.dumps({"model": "m", "messages": messages, "stream": True, **extra}).encode()


# ---------------------------------------------------------------------------- body splitting


def test_chat_body_is_cut_into_one_piece_per_message_and_joins_back_exactly() -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    raw = chat_body(msgs, tools=[{"type": "function", "function": {"name": "x" * 300}}])
    split = bodies.split_body(raw)
    assert rejoin(split) == raw
    assert split.body.kind == "json"
    assert split.body.messages == tuple(bodies.piece_id(json.dumps(m).encode()) for m in msgs)
    assert split.body.fields == {"model": "m", "stream": True}
    assert split.body.keys == ("model", "messages", "stream", "tools")
    assert "tools" in split.body.named  # a long value is a piece of its own
    assert split.body.size == len(raw)


def test_growing_history_reuses_pieces_so_storage_is_linear() -> None:
    known: set[str] = set()
    new_bytes = []
    msgs: list[dict] = []
    for turn in range(30):
        msgs.append({"role": "user", "content": f"question {turn} " + "x" * 1000})
        split = bodies.split_body(chat_body(msgs))
        new_bytes.append(sum(len(v) for k, v in split.pieces.items() if k not in known))
        known.update(split.pieces)
        msgs.append({"role": "assistant", "content": f"answer {turn}"})
    # Every turn adds only its new messages (~1 KB), although the body grows to ~30 KB.
    assert max(new_bytes[1:]) < 1200
    assert len(chat_body(msgs)) > 30_000


def test_whitespace_and_odd_layouts_round_trip() -> None:
    raw = b' { "messages" : [ {"role":"user","content":"a"} ,\n {"role":"user","content":"b"} ] ,"n":1 } \n'
    split = bodies.split_body(raw)
    assert rejoin(split) == raw
    assert len(split.body.messages or ()) == 2


@pytest.mark.parametrize(
    "raw,kind",
    [
        (b"", "empty"),
        (b"not json", "text"),
        (b"[1,2,3]", "text"),
        (b'{"a":1} trailing', "text"),
        (b"\xff\xfe binary", "bytes"),
        (b"x" * 5000, "bytes"),
        ('{"text":"\u00e9t\u00e9 \U0001f600"}'.encode(), "json"),
    ],
)
def test_bodies_of_every_kind_round_trip(raw: bytes, kind: str) -> None:
    split = bodies.split_body(raw)
    assert split.body.kind == kind
    assert rejoin(split) == raw


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=200)
@given(
    doc=st.dictionaries(
        st.sampled_from(["messages", "input", "model", "tools", "system", "prompt", "x"]) | st.text(max_size=6),
        json_values,
        max_size=6,
    ),
    indent=st.sampled_from([None, 0, 2]),
    sep=st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")]),
)
def test_any_json_object_round_trips_byte_for_byte(doc, indent, sep) -> None:
    raw = json.dumps(doc, indent=indent, separators=sep, ensure_ascii=False).encode()
    split = bodies.split_body(raw)
    assert rejoin(split) == raw
    assert split.body.sha256 == hashlib.sha256(raw).hexdigest()
    if isinstance(doc.get("messages"), list):
        assert split.body.messages is not None and len(split.body.messages) == len(doc["messages"])


@settings(max_examples=200)
@given(st.binary(max_size=600))
def test_any_bytes_round_trip(raw: bytes) -> None:
    assert rejoin(bodies.split_body(raw)) == raw


def test_body_record_round_trip() -> None:
    split = bodies.split_body(chat_body([{"role": "user", "content": "hi"}], system="s" * 400))
    again = bodies.decode_body(json.loads(json.dumps(bodies.encode_body(split.body))), lambda x: None)
    assert again == split.body
    assert any(isinstance(p, PieceRef) for p in again.parts)


def test_history_is_one_run_when_separators_are_uniform() -> None:
    raw = chat_body([{"role": "user", "content": str(i)} for i in range(5)])
    split = bodies.split_body(raw)
    runs = [p for p in split.body.parts if isinstance(p, bodies.HistoryRun)]
    assert runs == [bodies.HistoryRun(", ")]
    assert rejoin(split) == raw


def test_history_with_mixed_separators_is_listed_piece_by_piece() -> None:
    raw = b'{"messages": [{"a":1},{"b":2} , {"c":3}]}'
    split = bodies.split_body(raw)
    assert not any(isinstance(p, bodies.HistoryRun) for p in split.body.parts)
    assert len(split.body.messages or ()) == 3
    assert rejoin(split) == raw


def test_history_builds_on_an_earlier_exchange() -> None:
    first = bodies.split_body(chat_body([{"role": "user", "content": "a"}]))
    second = bodies.split_body(chat_body([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                          {"role": "user", "content": "c"}]))
    rec = bodies.encode_body(second.body, base=(7, 1))
    assert rec["history"] == {"base": 7, "keep": 1, "add": list(second.body.messages[1:])}
    history = {7: first.body.messages}
    assert bodies.decode_body(json.loads(json.dumps(rec)), history.get) == second.body
    with pytest.raises(ValueError, match="builds on exchange 7, which is missing"):
        bodies.decode_body(rec, lambda x: None)


def test_prefix_digests_identify_prefixes() -> None:
    a = bodies.prefix_digests(["x", "y", "z"])
    b = bodies.prefix_digests(["x", "y", "w"])
    assert len(a) == 4 and a[:3] == b[:3] and a[3] != b[3]
    assert len(set(a)) == 4


@pytest.mark.parametrize(
    "raw",
    [
        b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"messages": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}",
        b'{"model": "m", "tools": ' + b"{\"a\":" * 3000 + b"1" + b"}" * 3000 + b"}",
    ],
    ids=["prompt", "message", "tools"],
)
def test_a_body_nested_deeper_than_the_parser_goes_is_kept_whole(raw: bytes) -> None:
    split = bodies.split_body(raw)  # no RecursionError: a client may send anything
    assert split.body.kind == "bytes" and bodies.join_body(split.body, split.pieces.__getitem__) == raw


def test_a_damaged_body_record_is_refused_not_followed() -> None:
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    good = bodies.encode_body(bodies.split_body(raw).body)

    def no_history(xid: int) -> None:
        return None

    for damaged in (
        {**good, "parts": "text"},
        {**good, "parts": [*good["parts"], {"p": "../../etc/passwd"}]},
        {**good, "history": {"add": ["not-an-id"]}},
        {**good, "history": {"base": True, "keep": 1, "add": []}},
        {**good, "history": {"base": 1, "keep": -1, "add": []}},
        {**good, "fields": {"model": ["nested"]}},
        {**good, "fields": {"model": "\udcff"}},
        {**good, "named": {"prompt": "0" * 32}},  # a piece that is not one of the body's
        {**good, "sha256": 7},
        {**good, "size": 1e300},
    ):
        with pytest.raises(ValueError):
            bodies.decode_body(damaged, no_history)


def test_unrebuildable_says_what_is_missing_or_does_not_hash() -> None:
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    split = bodies.split_body(raw)

    def blocks(pid: str) -> list[bytes]:
        if pid not in split.pieces:
            raise bodies.MissingPiece(pid)
        return [split.pieces[pid]]

    assert bodies.unrebuildable(split.body, blocks) is None

    def none(pid: str) -> list[bytes]:
        raise bodies.MissingPiece(pid, " (gone)")

    (pid,) = split.body.messages or ()
    assert bodies.unrebuildable(split.body, none) == f"piece {pid} is missing (gone)"
    changed = bodies.Body(split.body.kind, split.body.size, "0" * 64, split.body.parts, split.body.messages)
    assert "does not match its recorded SHA-256" in (bodies.unrebuildable(changed, blocks) or "")
