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
    why = next(x for x in original.exchanges if x.xid == 4).not_recorded
    assert why is not None and why.startswith(fmt.NOT_RECORDED_PREFIX)
    in_memory = subset_recording(original, [1, 2, 3, 4])
    assert [x.not_recorded for x in in_memory.exchanges if x.xid == 4] == [why]
    write_subset(original, [1, 2, 3, 4], tmp_path / "subset")
    copied = load(tmp_path / "subset")
    assert [(x.xid, x.not_recorded) for x in copied.exchanges if not x.finished] == [(4, why)]
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
