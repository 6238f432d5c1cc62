"""The output paths a command writes (proxycheck.io.outputs): an unwritable one is one BadInput
naming it before anything happens; files are written 0600, the directories created 0700."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from proxycheck.core.errors import BadInput
from proxycheck.io.outputs import check_outputs, make_dirs, write_file

pytestmark = pytest.mark.timeout(10)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def problem(**kw) -> str:
    with pytest.raises(BadInput) as raised:
        check_outputs(**kw)
    return str(raised.value)


def test_a_file_under_a_file_a_directory_for_a_file_and_a_file_for_a_directory_are_refused(tmp_path: Path) -> None:
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "DIR").mkdir()
    under = tmp_path / "FILE" / "deeper" / "v.json"
    assert problem(files={"--json": str(under)}) == f"{under}: cannot be written: {tmp_path / 'FILE'} is not a directory"
    assert problem(files={"--html": str(tmp_path / "DIR")}) == f"{tmp_path / 'DIR'}: is a directory (--html takes a file)"
    assert problem(directories={"--out": str(tmp_path / "FILE")}) == (
        f"{tmp_path / 'FILE'}: exists and is not a directory (--out takes a directory)")
    assert problem(directories={"--out": str(tmp_path / "FILE" / "run")}) == (
        f"{tmp_path / 'FILE' / 'run'}: cannot be written: {tmp_path / 'FILE'} is not a directory")
    assert list((tmp_path / "DIR").iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["DIR", "FILE"]


def test_new_paths_existing_files_standard_output_and_flags_not_given_pass(tmp_path: Path) -> None:
    (tmp_path / "old.json").write_text("{}")
    check_outputs(files={"--json": str(tmp_path / "new" / "sub" / "v.json"), "--junit": str(tmp_path / "old.json"),
                         "--html": None, "--har": "-"},
                  directories={"--out": str(tmp_path / "a" / "b"), "--keep": None})  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]  # nothing was created


def test_written_files_are_0600_and_the_directories_made_for_them_0700(tmp_path: Path) -> None:
    old_umask = os.umask(0)  # the widest umask: the modes must not depend on it
    try:
        target = tmp_path / "reports" / "ci" / "verdict.json"
        write_file(target, "{}\n")
        existing = tmp_path / "loose.txt"
        existing.write_text("old")
        os.chmod(existing, 0o666)
        write_file(existing, b"new")
    finally:
        os.umask(old_umask)
    assert target.read_text() == "{}\n" and mode(target) == 0o600
    assert mode(tmp_path / "reports") == 0o700 and mode(tmp_path / "reports" / "ci") == 0o700
    assert existing.read_bytes() == b"new" and mode(existing) == 0o600
    assert sorted(p.name for p in (tmp_path / "reports" / "ci").iterdir()) == ["verdict.json"]  # no temporary left


def test_an_existing_directory_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    make_dirs(shared / "run" / "deep")
    assert mode(shared) == 0o755
    assert mode(shared / "run") == 0o700 and mode(shared / "run" / "deep") == 0o700
