"""Recordings made of part of another (proxycheck.io.subset), read back with the loader."""

from __future__ import annotations

from pathlib import Path

from proxycheck.core.recording.sessions import DEFAULT_SESSION_HEADERS
from proxycheck.core.recording.summary import summarize_sessions
from proxycheck.io.recordings import recorded_session_headers
from proxycheck.io.storage import load
from proxycheck.io.subset import write_subset

EXAMPLE = Path(__file__).resolve().parents[2] / "replays" / "example-agent"


def sessions_of(directory: Path):  # type: ignore[no-untyped-def]
    rec = load(directory)
    headers = recorded_session_headers(rec.meta) + DEFAULT_SESSION_HEADERS
    return rec, summarize_sessions(rec.exchanges, rec.piece, session_headers=headers)


def test_a_subset_is_the_same_exchanges_byte_for_byte(tmp_path: Path) -> None:
    original, sessions = sessions_of(EXAMPLE)
    first = sessions[0]
    xids = [t.xid for t in first.turns]
    assert write_subset(original, xids, tmp_path / "sub") == len(xids)
    copy, copied = sessions_of(tmp_path / "sub")
    assert [s.id for s in copied] == [first.id]
    assert [t.outcome for t in copied[0].turns] == [t.outcome for t in first.turns]
    by_xid = {x.xid: x for x in original.exchanges}
    for x in copy.exchanges:
        src = by_xid[x.xid]
        assert copy.request_body(x) == original.request_body(src)
        assert x.timed_chunks() == src.timed_chunks() and x.status == src.status
        assert x.t_request == src.t_request and x.in_flight == src.in_flight
    assert [t.think_time for t in copied[0].turns] == [t.think_time for t in first.turns]
    assert (tmp_path / "sub" / "journal.jsonl").stat().st_mode & 0o777 == 0o600


def test_bodies_replaced_and_think_times_shifted(tmp_path: Path) -> None:
    original, sessions = sessions_of(EXAMPLE)
    turns = sessions[0].turns
    new_body = original.request_body(next(x for x in original.exchanges if x.xid == turns[0].xid))
    write_subset(original, [t.xid for t in turns[:3]], tmp_path / "sub",
                 bodies={turns[1].xid: new_body}, shifts={turns[1].xid: 2.5})  # fmt: skip
    copy, copied = sessions_of(tmp_path / "sub")
    x2 = next(x for x in copy.exchanges if x.xid == turns[1].xid)
    assert copy.request_body(x2) == new_body
    think = [t.think_time for t in copied[0].turns]
    assert abs(think[1] - turns[1].think_time - 2.5) < 1e-6
    assert abs(think[2] - turns[2].think_time) < 1e-6  # later turns keep theirs
