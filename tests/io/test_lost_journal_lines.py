"""A journal line that cannot be read never makes a wedge: an exchange left without its end by a
damaged line that may have held that end is "not recorded to the end", naming the line; a real
wedge (no end, no damaged line after its last record) stays in flight, and so does an exchange the
recorder's close record listed as in flight. A recording made of part of another (what minimize
writes) keeps "not recorded to the end"."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_runner import main_output

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording import journal as fmt
from proxycheck.core.recording.journal import what_is_not_recorded
from proxycheck.core.recording.summary import analyze
from proxycheck.io.storage import load
from proxycheck.io.subset import subset_recording, write_subset

EXAMPLE = Path(__file__).resolve().parents[2] / "replays" / "example-agent"

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def rec(tmp_path: Path) -> Path:
    """A copy of the example: exchanges 1-3 and 5-6 end; exchange 4 (s1 turn 4) is the wedge,
    in flight when the recorder closed (its close record says so)."""
    target = tmp_path / "rec"
    shutil.copytree(EXAMPLE, target)
    return target


def lines(rec: Path) -> list[bytes]:
    return (rec / fmt.JOURNAL_FILE).read_bytes().splitlines(keepends=True)


def number_of(rec: Path, kind: str, xid: int | None) -> int:
    return next(i for i, line in enumerate(lines(rec), 1)
                if (r := json.loads(line))["k"] == kind and r.get("x") == xid)  # fmt: skip


def rewrite(rec: Path, changes: dict[int, bytes | None]) -> None:
    """Replace journal lines by number (None drops the line)."""
    out = [changes.get(i, line) for i, line in enumerate(lines(rec), 1)]
    (rec / fmt.JOURNAL_FILE).write_bytes(b"".join(line for line in out if line is not None))


def turns(capsys: pytest.CaptureFixture[str], rec: Path) -> dict[tuple[str, int], dict]:
    status, out, err = main_output(capsys, "sessions", "--json", str(rec))
    assert status == 0, err
    doc = json.loads(out)
    return {(s["label"], t["turn"]): t for s in doc["sessions"] for t in s["turns"]}


def test_a_damaged_end_line_is_not_a_wedge(rec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    end = number_of(rec, "end", 2)
    rewrite(rec, {end: b'{"k":"end","x":2,"t":\x00\n'})
    by_turn = turns(capsys, rec)
    assert by_turn[("s1", 2)]["outcome"] == "not_recorded"
    assert f"{rec / fmt.JOURNAL_FILE}:{end} is damaged" in by_turn[("s1", 2)]["detail"]
    # Every other exchange is as recorded: a later record of exchange 4 shows that line was not its end.
    assert [t["outcome"] for k, t in sorted(by_turn.items()) if k != ("s1", 2)] == ["ok", "ok", "in_flight", "ok", "ok"]


def test_a_damaged_data_line_makes_no_cut(rec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Exchange 1's only data line holds a NaN: loaded without it, the exchange ends with no event,
    # which reads as a cut. What it lacks is the line, not the traffic.
    data = number_of(rec, "data", 1)
    rewrite(rec, {data: lines(rec)[data - 1].replace(b'"c":[[', b'"c":[[NaN,', 1)})
    by_turn = turns(capsys, rec)
    assert by_turn[("s1", 1)]["outcome"] == "not_recorded"
    assert f"{rec / fmt.JOURNAL_FILE}:{data} is damaged" in by_turn[("s1", 1)]["detail"]
    assert "truncated" in by_turn[("s1", 1)]["detail"]  # what it looked like, said
    # The line's kind and exchange are still readable: no other exchange is touched.
    assert [t["outcome"] for k, t in sorted(by_turn.items()) if k != ("s1", 1)] == ["ok", "ok", "in_flight", "ok", "ok"]
    # And a copy of it (an export, imported again) shows no cut either.
    har = tmp_path / "rec.har"
    assert main_output(capsys, "export", "--har", str(har), str(rec))[0] == 0
    assert main_output(capsys, "import", "--out", str(tmp_path / "back"), str(har))[0] == 0
    assert turns(capsys, tmp_path / "back")[("s1", 1)]["outcome"] == "not_recorded"


def test_a_line_whose_exchange_cannot_be_read_spares_what_ended_well(
    rec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Garbage from its first byte: any exchange in flight then may have lost a record to it. Those
    # that later ended well stay ok; a failure among them would not be trusted.
    # Exchange 5's end line: exchanges 4 and 5 are in flight there.
    end = number_of(rec, "end", 5)
    rewrite(rec, {end: b"\x00\x01garbage\n", number_of(rec, "close", None): None})
    by_turn = turns(capsys, rec)
    assert by_turn[("s2", 1)]["outcome"] == "not_recorded"  # in flight at that line, nothing of it after
    assert by_turn[("s1", 4)]["outcome"] == "in_flight"  # a later record of it: the line was not its end
    assert [by_turn[k]["outcome"] for k in (("s1", 1), ("s1", 2), ("s1", 3), ("s2", 2))] == ["ok"] * 4


def test_a_bad_end_record_loses_only_its_own_exchange(rec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # JSON that parses but does not fit: the exchange it names is known, the others keep their outcome.
    close = number_of(rec, "close", None)
    rewrite(rec, {number_of(rec, "end", 6): b'{"k":"end","x":6,"t":"soon"}\n', close: None})
    by_turn = turns(capsys, rec)
    assert by_turn[("s2", 2)]["outcome"] == "not_recorded"
    assert by_turn[("s1", 4)]["outcome"] == "in_flight"


def test_a_wedge_cut_off_by_a_damaged_last_line_is_not_recorded_to_the_end(
    rec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The recorder killed (no close record) and its last line, the wedge's last data, damaged:
    # nothing says whether the stream had ended.
    last = number_of(rec, "data", 4)
    rewrite(rec, {number_of(rec, "close", None): None, last: lines(rec)[last - 1][:30]})
    assert turns(capsys, rec)[("s1", 4)]["outcome"] == "not_recorded"


def test_a_real_wedge_stays_in_flight(rec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The same kill without any damaged line: the wedge is evidence, as recorded.
    rewrite(rec, {number_of(rec, "close", None): None})
    assert turns(capsys, rec)[("s1", 4)]["outcome"] == "in_flight"
    # A damaged line before the wedge's last record could not have been its end.
    rewrite(rec, {number_of(rec, "end", 5): b"not json\n"})
    by_turn = turns(capsys, rec)
    assert by_turn[("s1", 4)]["outcome"] == "in_flight"
    assert by_turn[("s2", 1)]["outcome"] == "not_recorded"


@pytest.mark.parametrize("cause", ["write_failure", "damaged_line"])
def test_a_subset_keeps_not_recorded_to_the_end(rec: Path, tmp_path: Path, cause: str) -> None:
    # What minimize writes: the chosen exchanges, as an ordinary recording. Exchange 4 must not
    # come out of it as a wedge the original never showed.
    if cause == "write_failure":
        meta = json.loads((rec / fmt.META_FILE).read_text())
        meta[fmt.WRITE_FAILURES] = [fmt.write_failure_entry(3.5, "No space left on device", [4])]
        (rec / fmt.META_FILE).write_text(json.dumps(meta))
    else:
        last = number_of(rec, "data", 4)
        rewrite(rec, {number_of(rec, "close", None): None, last: lines(rec)[last - 1][:30]})
    original = load(rec)
    why = what_is_not_recorded(next(x for x in original.exchanges if x.xid == 4))
    assert why is not None
    in_memory = subset_recording(original, [1, 2, 3, 4])
    assert [what_is_not_recorded(x) for x in in_memory.exchanges if x.xid == 4] == [why]
    write_subset(original, [1, 2, 3, 4], tmp_path / "subset")
    copied = load(tmp_path / "subset")
    assert [(x.xid, what_is_not_recorded(x)) for x in copied.exchanges if not x.finished] == [(4, why)]
    assert [analyze(x).classified.outcome for x in copied.exchanges] == [Outcome.OK] * 3 + [Outcome.NOT_RECORDED]


def test_an_export_and_its_import_keep_not_recorded_to_the_end(
    rec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = json.loads((rec / fmt.META_FILE).read_text())
    meta[fmt.WRITE_FAILURES] = [fmt.write_failure_entry(3.5, "No space left on device", [4])]
    (rec / fmt.META_FILE).write_text(json.dumps(meta))
    har = tmp_path / "rec.har"
    assert main_output(capsys, "export", "--har", str(har), str(rec))[0] == 0
    assert main_output(capsys, "import", "--out", str(tmp_path / "back"), str(har))[0] == 0
    assert turns(capsys, tmp_path / "back")[("s1", 4)]["outcome"] == "not_recorded"
