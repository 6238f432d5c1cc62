"""Recordings made of part of another (proxycheck.io.subset), read back with the loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxycheck.core.recording.sessions import DEFAULT_SESSION_HEADERS
from proxycheck.core.recording.summary import summarize_sessions
from proxycheck.io.recordings import open_recording, recorded_session_headers
from proxycheck.io.storage import RecordingWriter, load
from proxycheck.io.subset import subset_recording, write_subset

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


def socket_recording(directory: Path, turns: int) -> Path:
    """One WebSocket session of `turns` turns, 2 s apart, that the chain cut while it sat idle 5 s
    after its last turn (no close frame)."""
    w = RecordingWriter(directory)
    x = w.request("GET", "http://e/v1/responses", [("upgrade", "websocket"), ("connection", "Upgrade")], b"", t=0.0)
    w.response(x, 101, "Switching Protocols", [("upgrade", "websocket"), ("connection", "Upgrade")], streamed=False,
               t=0.01)
    t = 0.1
    for n in range(1, turns + 1):
        create = {"type": "response.create", "model": "m", "input": f"step {n}"}
        w.ws_message(x, json.dumps(create).encode(), from_client=True, t=t)
        for k, kind in enumerate(("response.created", "response.output_text.delta", "response.completed")):
            event = {"type": kind, "response": {"id": f"resp_{n}", "output": []}, "delta": "hi"}
            w.ws_message(x, json.dumps(event).encode(), from_client=False, t=t + 0.1 * (k + 1))
        t += 0.3 + 2.0
    w.ws_close(x, None, 1006, "", t=t - 2.0 + 5.0)
    w.error(x, "server disconnected", t=t - 2.0 + 5.0)
    w.close()
    return directory


def test_a_socket_cut_to_its_first_turns_keeps_its_idle_end_and_reads_back_as_in_memory(tmp_path: Path) -> None:
    original = load(socket_recording(tmp_path / "rec", 4))
    (whole,) = open_recording(str(tmp_path / "rec")).planned
    assert [t.socket_end for t in whole.turns] == [False] * 4 + [True]
    (xid,) = [x.xid for x in original.exchanges]
    cut = {"sockets": {xid: 2}, "socket_shifts": {xid: {2: -1.5}}}
    write_subset(original, [xid], tmp_path / "sub", **cut)  # type: ignore[arg-type]
    written, in_memory = load(tmp_path / "sub"), subset_recording(original, [xid], **cut)  # type: ignore[arg-type]
    (a,), (b,) = written.exchanges, in_memory.exchanges
    assert [(m.t, m.data) for m in a.ws] == [(m.t, m.data) for m in b.ws] and a.ws_close == b.ws_close
    assert (a.t_error, a.error) == (b.t_error, b.error)
    (socket,) = open_recording(str(tmp_path / "sub")).planned
    # Turns 1 and 2 (the wait before turn 2 shortened by 1.5 s), then the idle end as long as recorded.
    assert [(t.turn, t.socket_end) for t in socket.turns] == [(1, False), (2, False), (3, True)]
    assert socket.turns[1].think_time == pytest.approx(whole.turns[1].think_time - 1.5, abs=1e-5)
    assert socket.turns[2].think_time == pytest.approx(whole.turns[-1].think_time, abs=1e-5)
    assert socket.turns[1].body == whole.turns[1].body  # a socket's messages as recorded
