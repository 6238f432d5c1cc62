"""One path from disk to analysis (proxycheck.io.recordings): a loaded recording parses each
response once for its summaries and its plan; an in-memory subset plans as the written one does;
a recording being written is followed incrementally, analysing only what changed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from proxycheck.core.recording import summary
from proxycheck.core.recording.journal import JOURNAL_FILE
from proxycheck.io.recordings import JournalTail, LiveSessions, LoadedRecording, open_recording
from proxycheck.io.storage import RecordingWriter, load
from proxycheck.io.subset import subset_recording, write_subset

EXAMPLE = Path(__file__).resolve().parents[2] / "replays" / "example-agent"
CHAT = "http://gw:4000/v1/chat/completions"
CLEAN = (b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}\n\n', b"data: [DONE]\n\n")


def chat(*contents: str) -> bytes:
    return json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": c} for c in contents]}).encode()


def exchange(w: RecordingWriter, t: float, body: bytes, *, end: bool = True) -> int:
    x = w.request("POST", CHAT, [("content-type", "application/json")], body, t=t)
    w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True, t=t + 0.1)
    for i, event in enumerate(CLEAN):
        w.data(x, event, t=t + 0.2 + 0.05 * i)
    if end:
        w.end(x, t=t + 0.4)
    w.flush()
    return x


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The xids whose responses were parsed, in order."""
    seen: list[int] = []
    real = summary.analyze_exchange

    def counting(ex, dialect):  # type: ignore[no-untyped-def]
        seen.append(ex.xid)
        return real(ex, dialect)

    monkeypatch.setattr(summary, "analyze_exchange", counting)
    return seen


def test_summaries_and_plan_parse_each_response_once(parses: list[int]) -> None:
    loaded = open_recording(str(EXAMPLE))
    assert loaded.planned and loaded.summaries
    assert sorted(parses) == sorted(x.xid for x in loaded.recording.exchanges)


def test_an_in_memory_subset_plans_as_the_written_one(tmp_path: Path) -> None:
    rec = load(EXAMPLE)
    keep = [x.xid for x in rec.exchanges][:4]
    shifts, bodies = {keep[2]: 0.75}, {keep[1]: chat("shorter")}
    write_subset(rec, keep, tmp_path / "sub", bodies=bodies, shifts=shifts)
    on_disk = open_recording(str(tmp_path / "sub")).planned
    in_memory = LoadedRecording(subset_recording(rec, keep, bodies=bodies, shifts=shifts)).planned

    def shape(plan):  # type: ignore[no-untyped-def]
        # The written subset numbers its exchanges 1..n; the in-memory one keeps the original's.
        return [(s.id, s.start, [dataclasses.replace(t, xid=0) for t in s.turns]) for s in plan]

    assert shape(in_memory) == shape(on_disk)
    assert [t.xid for s in in_memory for t in s.turns if t.body == chat("shorter")] == [keep[1]]


def test_live_sessions_follow_the_journal_and_analyse_only_what_changed(tmp_path: Path, parses: list[int]) -> None:
    w = RecordingWriter(tmp_path / "rec")
    tail, live = JournalTail(tmp_path / "rec" / JOURNAL_FILE), LiveSessions(tmp_path / "rec")
    first = exchange(w, 1.0, chat("a"))
    other = exchange(w, 1.5, chat("z"))
    live.add(tail.poll())
    assert live.session_count() == 2 and sorted(parses) == [first, other]
    parses.clear()
    third = exchange(w, 3.0, chat("a", "b"), end=False)  # turn 2 of the first session, in flight
    live.add(tail.poll())
    assert live.session_count() == 2 and parses == [third]
    parses.clear()
    assert live.session_count() == 2 and parses == []  # nothing new: nothing parsed
    w.end(third, t=3.5)
    w.close()
    live.add(tail.poll())
    assert live.session_count() == 2 and parses == [third]
    assert len(open_recording(str(tmp_path / "rec")).summaries) == 2


def test_live_sessions_wait_for_the_metadata(tmp_path: Path) -> None:
    live = LiveSessions(tmp_path / "none-yet")
    live.add([{"k": "req", "x": 1, "t": 0}])
    assert live.session_count() is None
