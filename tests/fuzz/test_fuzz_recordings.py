"""Fuzzed recordings and runs through the commands that read them: no traceback, ever.

Seeded and bounded: each case takes a real recording (the example, and one with a piece in
blobs/) or a real run (the example replayed against the reference engine), damages its journal,
recording.json, blob files, observations or run.json the way crashes, full disks and hostile
testers do (byte flips, truncations, duplicated, swapped and dropped lines, deep nesting, NaN and
Infinity, huge numbers, values of the wrong type) and runs `sessions`, `sessions --json`,
`replay --dry-run`, `export --har` and `diff` in this process. Each must exit 0 or 2 (`diff`: 1
too, a fault or an incomplete run); an exit 2 prints exactly one line, `proxycheck: ` and the
file; `sessions --json` always prints strict JSON. A failing case names its seed and what it did,
so it replays exactly.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import shutil
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import main_output, main_status

from proxycheck.core.recording import journal as fmt
from proxycheck.io.runstore import OBSERVATIONS_FILE, RUN_FILE
from proxycheck.io.storage import RecordingWriter

EXAMPLE = Path(__file__).resolve().parents[2] / "replays" / "example-agent"
# Fixed seeds; PROXYCHECK_FUZZ_SCALE=N runs N times as many (new seeds after the usual ones).
SCALE = int(os.environ.get("PROXYCHECK_FUZZ_SCALE", "1"))
RECORDING_CASES = 120 * SCALE
RUN_CASES = 48 * SCALE

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WEIRD_NUMBERS = [b"NaN", b"Infinity", b"-Infinity", b"1e309", b"-1e309", b"1e300", b"-1e300", b"9" * 400,
                  b"-" + b"9" * 30, b"0", b"-1", b"1.5", b"4" * 5000]  # fmt: skip
_WRONG_VALUES: list[Any] = [None, True, False, -1, 0, 2**70, 1e300, -1e300, 0.5, "", "x", "🙂\udcff", [], [1, 2],
                            [["a", "b"]], {}, {"a": 1}, {"redacted": True}]  # fmt: skip


# Mutations: each takes the file's bytes and the random source, returns the new bytes and what it did.

Mutation = Callable[[bytes, random.Random], tuple[bytes, str]]


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True) or [b""]


def flip(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    if not data:
        return data, "flip (empty)"
    raw = bytearray(data)
    pos, value = rnd.randrange(len(raw)), rnd.randrange(256)
    raw[pos] = value
    return bytes(raw), f"byte {pos} := {value}"


def truncate(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    pos = rnd.randrange(len(data) + 1)
    return data[:pos], f"cut at {pos}"


def cut_out(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    pos = rnd.randrange(len(data) + 1)
    n = rnd.randint(1, 200)
    return data[:pos] + data[pos + n :], f"bytes {pos}..{pos + n} removed"


def duplicate_line(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    lines = _lines(data)
    i, j = rnd.randrange(len(lines)), rnd.randrange(len(lines) + 1)
    lines.insert(j, lines[i] if lines[i].endswith(b"\n") else lines[i] + b"\n")
    return b"".join(lines), f"line {i + 1} copied before line {j + 1}"


def swap_lines(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    lines = [line if line.endswith(b"\n") else line + b"\n" for line in _lines(data)]
    i, j = rnd.randrange(len(lines)), rnd.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return b"".join(lines), f"lines {i + 1} and {j + 1} swapped"


def drop_line(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    lines = _lines(data)
    i = rnd.randrange(len(lines))
    del lines[i]
    return b"".join(lines), f"line {i + 1} dropped"


def deep_nesting(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    depth = rnd.choice([900, 990, 5000, 100_000])
    nested = b"[" * depth + b"]" * depth
    matches = list(_NUMBER.finditer(data))
    if matches and rnd.random() < 0.7:
        m = rnd.choice(matches)
        return data[: m.start()] + nested + data[m.end() :], f"number at {m.start()} := nesting {depth} deep"
    lines = _lines(data)
    i = rnd.randrange(len(lines) + 1)
    lines.insert(i, b'{"k":"data","x":1,"c":' + nested + b',"v":""}\n')
    return b"".join(lines), f"line nested {depth} deep inserted before line {i + 1}"


def weird_number(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    matches = list(_NUMBER.finditer(data))
    if not matches:
        return data, "no number"
    m, value = rnd.choice(matches), rnd.choice(_WEIRD_NUMBERS)
    return data[: m.start()] + value + data[m.end() :], f"number at {m.start()} := {value[:12]!r}"


def wrong_type(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    """A value somewhere in one record (any depth) replaced by one of another type, the line still JSON."""
    lines = _lines(data)
    candidates = [i for i, line in enumerate(lines) if line.strip().startswith(b"{")]
    if not candidates:
        return data, "no record"
    i = rnd.choice(candidates)
    try:
        record = json.loads(lines[i])
    except (ValueError, RecursionError):
        return data, "record already damaged"
    paths = list(_paths(record))
    if not paths:
        return data, "empty record"
    path, value = rnd.choice(paths), rnd.choice(_WRONG_VALUES)
    node = record
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    lines[i] = json.dumps(record, ensure_ascii=rnd.random() < 0.5).encode("utf-8", "surrogatepass") + b"\n"
    return b"".join(lines), f"line {i + 1}: {'/'.join(map(str, path))} := {value!r}"


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from _paths(value, (*prefix, key))


MUTATIONS: list[Mutation] = [flip, truncate, cut_out, duplicate_line, swap_lines, drop_line, deep_nesting,
                             weird_number, wrong_type]  # fmt: skip


def mutate(path: Path, rnd: random.Random, count: int) -> list[str]:
    data = path.read_bytes() if path.exists() else b""
    done = []
    for _ in range(count):
        mutation = rnd.choice(MUTATIONS)
        data, what = mutation(data, rnd)
        done.append(f"{path.name}: {mutation.__name__}: {what}")
    path.write_bytes(data)
    return done


def damage_blobs(rec: Path, rnd: random.Random) -> list[str]:
    blobs = sorted((rec / fmt.BLOB_DIR).iterdir()) if (rec / fmt.BLOB_DIR).is_dir() else []
    if not blobs:
        return []
    blob = rnd.choice(blobs)
    how = rnd.choice(["delete", "flip", "truncate", "directory"])
    if how == "delete":
        blob.unlink()
    elif how == "directory":
        blob.unlink()
        blob.mkdir()
    else:
        data = bytearray(blob.read_bytes())
        if how == "flip":
            data[rnd.randrange(len(data))] ^= 1 << rnd.randrange(8)
        else:
            del data[rnd.randrange(len(data)) :]
        blob.write_bytes(bytes(data))
    return [f"blobs/{blob.name[:8]}: {how}"]


# Checking one command's answer ----------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], what: list[str], *argv: str) -> tuple[int, str, str]:
    """The command in this process; a traceback fails the case, naming what was done."""
    try:
        return main_output(capsys, *argv)
    except BaseException:  # noqa: BLE001 (anything escaping the CLI is the bug being looked for)
        capsys.readouterr()
        pytest.fail(f"traceback from proxycheck {' '.join(argv)} after {what}:\n{traceback.format_exc()}")


def check(status: int, err: str, allowed: set[int], named: Path, what: list[str], argv: tuple[str, ...]) -> None:
    context = f"proxycheck {' '.join(argv)} after {what}"
    assert "Traceback" not in err, f"{context}: {err}"
    assert status in allowed, f"{context}: exit {status}: {err}"
    if status == 2:
        lines = [line for line in err.splitlines() if not line.startswith("proxycheck: warning: ")]
        assert len(lines) == 1, f"{context}: {err}"
        assert lines[0].startswith(f"proxycheck: {named}"), f"{context}: {lines[0]}"


def strict_json(text: str, context: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"{context}: {name} printed in JSON")

    return json.loads(text, parse_constant=refuse)


# The recordings and the run -------------------------------------------------------------------


def blob_recording(target: Path) -> Path:
    """Two turns of one conversation whose first message is too large for a journal line."""
    w = RecordingWriter(target, wall=lambda: 1_764_400_000.0)
    history = [{"role": "user", "content": "x" * (1 << 20) + "!"}]
    t = 0.0
    for turn in range(2):
        body = json.dumps({"model": "m", "stream": True, "messages": history}).encode()
        x = w.request("POST", "http://127.0.0.1:4000/v1/chat/completions", [("content-type", "application/json")],
                      body, t=t)  # fmt: skip
        w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True, t=t + 0.01)
        w.data(x, b'data: {"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n', t=t + 0.02)
        w.data(x, b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n', t=t + 0.03)
        w.end(x, t=t + 0.04)
        history = [*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": f"turn {turn + 2}"}]
        t += 1.0
    w.close()
    return target


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("originals")
    shutil.copytree(EXAMPLE, root / "example")
    return {"example": root / "example", "blobs": blob_recording(root / "blobs")}


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("chain") / "chain.toml"
    path.write_text('engine = "http://127.0.0.1:9"\n')
    return path


@pytest.fixture(scope="module")
def original_run(module_engines, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example replayed twice on direct against a reference engine that answers at once."""
    engine = module_engines("--ttft-base", "0", "--ttft-per-kb", "0", "--token-interval", "0")
    root = tmp_path_factory.mktemp("run")
    (root / "chain.toml").write_text(f'engine = "{engine.url}"\n')
    status, _, err = _quiet_main("replay", "--chain", str(root / "chain.toml"), "--route", "direct", "--repeat", "2",
                                 "--pace", "fast", "--out", str(root / "run"), str(EXAMPLE))  # fmt: skip
    assert status == 0, err
    return root / "run"


def _quiet_main(*argv: str) -> tuple[int, str, str]:
    """`proxycheck ARGV` in this process, for a fixture (capsys is a test's): status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main_status(*argv)
    return status, out.getvalue(), err.getvalue()


# The cases ------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(RECORDING_CASES))
def test_a_fuzzed_recording_never_tracebacks(
    seed: int, originals: dict[str, Path], chain: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rnd = random.Random(seed)
    name = rnd.choice(sorted(originals))
    rec = tmp_path / name
    shutil.copytree(originals[name], rec)
    what = [name]
    target = rnd.random()
    if target < 0.75:
        what += mutate(rec / fmt.JOURNAL_FILE, rnd, rnd.randint(1, 3))
    elif target < 0.9:
        what += mutate(rec / fmt.META_FILE, rnd, 1)
    else:
        what += damage_blobs(rec, rnd) or mutate(rec / fmt.JOURNAL_FILE, rnd, 1)

    statuses = []
    for argv in (("sessions", str(rec)), ("replay", "--dry-run", "--chain", str(chain), str(rec))):
        status, _, err = run(capsys, what, *argv)
        check(status, err, {0, 2}, rec, what, argv)
        statuses.append(status)
    if statuses == [0, 2]:
        # What lists replays: damage skips the exchanges it touches, never the whole recording.
        assert err.endswith("holds no LLM requests to replay\n"), f"replay --dry-run after {what}: {err}"

    argv = ("sessions", "--json", str(rec))
    status, out, err = run(capsys, what, *argv)
    check(status, err, {0, 2}, rec, what, argv)
    if status == 0:
        doc = strict_json(out, f"sessions --json after {what}")
        assert doc["schema"] == "proxycheck.sessions/1"

    argv = ("export", "--har", str(tmp_path / "out.har"), str(rec))
    status, _, err = run(capsys, what, *argv)
    check(status, err, {0, 2}, rec, what, argv)
    if status == 0:
        strict_json((tmp_path / "out.har").read_text(), f"export --har after {what}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(RUN_CASES))
def test_a_fuzzed_run_never_tracebacks(
    seed: int, original_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rnd = random.Random(10_000 + seed)
    run_dir = tmp_path / "run"
    shutil.copytree(original_run, run_dir)
    (run_dir / "verdict.json").unlink(missing_ok=True)
    target = run_dir / (OBSERVATIONS_FILE if rnd.random() < 0.8 else RUN_FILE)
    what = mutate(target, rnd, rnd.randint(1, 3))
    argv = ("diff", "--json", str(tmp_path / "verdict.json"), str(run_dir))
    status, _, err = run(capsys, what, *argv)
    check(status, err, {0, 1, 2}, run_dir, what, argv)
    if status != 2:
        strict_json((tmp_path / "verdict.json").read_text(), f"diff --json after {what}")
