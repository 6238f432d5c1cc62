"""Every file a command writes: its path is checked before any traffic (one line, exit 2, the
engine sees nothing), it is written 0600 in directories created 0700, and a chain URL's userinfo
and a supplied query value are written nowhere.

Once per module: the reference engine with its access log on (each request it gets is a line).
Commands run in this process (`cli_runner.main_output`), as the CLI runs them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from pathlib import Path

import pytest
from cli_runner import main_output
from processes import EngineFactory

from proxycheck.io.procs import Managed

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "replays" / "example-agent"
REQUEST_LINE = re.compile(r'"[A-Z]+ (/\S*) HTTP/[\d.]+" \d{3} ')

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--access-log", "--token-interval", "0", "--ttft-base", "0", "--ttft-per-kb", "0")


def requests_seen(engine: Managed) -> list[str]:
    return REQUEST_LINE.findall(engine.log_path.read_text(errors="replace"))


def wait_for_requests(engine: Managed, count: int) -> list[str]:
    deadline = time.monotonic() + 5
    while len(requests_seen(engine)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return requests_seen(engine)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def chain_file(tmp: Path, engine: Managed, engine_url: str | None = None, extra: str = "") -> Path:
    path = tmp / "chain.toml"
    path.write_text(f'engine = "{engine_url or engine.url}"\n{extra}[[hop]]\nname = "edge"\nurl = "{engine.url}"\n')
    return path


def unwritable_cases(tmp: Path, chain: Path) -> dict[str, tuple[list[str], str]]:
    """Each command with one output it cannot write, and the path the line must name."""
    under = str(tmp / "FILE" / "x.json")  # a path under a file
    folder = str(tmp / "DIR")  # a directory where a file is to be written
    out_under = str(tmp / "FILE" / "run")
    fast = ["--pace", "fast"]
    return {
        "check --json": (["check", str(EXAMPLE), "--chain", str(chain), *fast, "--json", under], under),
        "check --junit": (["check", str(EXAMPLE), "--chain", str(chain), *fast, "--junit", folder], folder),
        "check --html": (["check", str(EXAMPLE), "--chain", str(chain), *fast, "--html", under], under),
        "check --out": (["check", str(EXAMPLE), "--chain", str(chain), *fast, "--out", out_under], out_under),
        "replay --out": (["replay", str(EXAMPLE), "--chain", str(chain), *fast, "--out", out_under], out_under),
        "bench --json": (["bench", str(EXAMPLE), "--chain", str(chain), "--route", "direct", "--concurrency", "1",
                          "--requests", "2", "--out", str(tmp / "bench"), "--json", under], under),
        "bench --out": (["bench", str(EXAMPLE), "--chain", str(chain), "--route", "direct", "--concurrency", "1",
                         "--requests", "2", "--out", out_under], out_under),
        "probe --json": (["probe", "--chain", str(chain), "--probe", "sse", "--timeout", "2", "--json", folder], folder),
        "minimize --out": (["minimize", str(EXAMPLE), "--chain", str(chain), "--out", out_under], out_under),
        "diff --html": (["diff", str(tmp / "no-run"), "--html", under], under),
        "compare --json": (["compare", str(tmp / "a"), str(tmp / "b"), "--json", under], under),
        "merge --out": (["merge", str(tmp / "a"), "--out", out_under], out_under),
        "export --har": (["export", str(EXAMPLE), "--har", under], under),
        "import --out": (["import", str(REPO / "tests" / "fixtures" / "har" / "chrome-chat.har"), "--out", out_under],
                         out_under),
    }  # fmt: skip


@pytest.mark.parametrize("case", list(unwritable_cases(Path("/t"), Path("/c"))))
def test_an_unwritable_output_is_one_line_before_any_traffic(engine: Managed, tmp_path: Path, capsys, case: str) -> None:
    (tmp_path / "FILE").write_text("not a directory")
    (tmp_path / "DIR").mkdir()
    argv, named = unwritable_cases(tmp_path, chain_file(tmp_path, engine))[case]
    before = len(requests_seen(engine))
    status, out, err = main_output(capsys, *argv)
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith(f"proxycheck: {named}: "), err
    assert "cannot be written" in err or "is a directory" in err, err
    time.sleep(0.2)  # a request sent at the last moment would be logged by now
    assert len(requests_seen(engine)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DIR", "FILE", "chain.toml"]  # nothing written


def test_check_writes_its_reports_and_run_0600_in_new_0700_directories(engine: Managed, tmp_path: Path, capsys) -> None:
    chain = chain_file(tmp_path, engine)
    out = tmp_path / "out"
    status, _, err = main_output(capsys, "check", str(EXAMPLE), "--chain", str(chain), "--pace", "fast",
                                 "--json", str(out / "ci" / "v.json"), "--junit", str(out / "ci" / "j.xml"),
                                 "--html", str(out / "h.html"), "--out", str(out / "runs" / "r1"))  # fmt: skip
    assert status == 0, err
    files = [out / "ci" / "v.json", out / "ci" / "j.xml", out / "h.html", out / "runs" / "r1" / "run.json",
             out / "runs" / "r1" / "observations.jsonl", out / "runs" / "r1" / "verdict.json"]  # fmt: skip
    assert {str(f.relative_to(tmp_path)): mode(f) for f in files} == {str(f.relative_to(tmp_path)): 0o600 for f in files}
    dirs = [out, out / "ci", out / "runs", out / "runs" / "r1"]
    assert {str(d.relative_to(tmp_path)): mode(d) for d in dirs} == {str(d.relative_to(tmp_path)): 0o700 for d in dirs}


def test_diff_writes_its_reports_0600(engine: Managed, tmp_path: Path, capsys) -> None:
    chain = chain_file(tmp_path, engine)
    run = tmp_path / "run"
    status, _, err = main_output(capsys, "replay", str(EXAMPLE), "--chain", str(chain), "--pace", "fast", "--out", str(run))
    assert status in (0, 1), err
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    status, _, err = main_output(capsys, "diff", str(run), "--json", str(shared / "d.json"), "--junit",
                                 str(shared / "new" / "d.xml"))  # fmt: skip
    assert status == 0, err
    assert mode(shared / "d.json") == 0o600 and mode(shared / "new" / "d.xml") == 0o600
    assert mode(shared) == 0o755 and mode(shared / "new") == 0o700  # an existing directory keeps its mode


def test_bench_and_compare_write_0600(engine: Managed, tmp_path: Path, capsys) -> None:
    chain = chain_file(tmp_path, engine)
    for name in ("a", "b"):
        status, _, err = main_output(capsys, "bench", str(EXAMPLE), "--chain", str(chain), "--route", "direct",
                                     "--concurrency", "1", "--requests", "4", "--out", str(tmp_path / "runs" / name),
                                     "--json", str(tmp_path / "json" / f"{name}.json"))  # fmt: skip
        assert status == 0, err
        assert mode(tmp_path / "json" / f"{name}.json") == 0o600 and mode(tmp_path / "runs" / name / "run.json") == 0o600
    assert mode(tmp_path / "runs") == 0o700 and mode(tmp_path / "json") == 0o700
    status, _, err = main_output(capsys, "compare", str(tmp_path / "runs" / "a"), str(tmp_path / "runs" / "b"),
                                 "--iterations", "50", "--json", str(tmp_path / "cmp" / "c.json"))  # fmt: skip
    assert status in (0, 1), err
    assert mode(tmp_path / "cmp" / "c.json") == 0o600 and mode(tmp_path / "cmp") == 0o700
    status, _, err = main_output(capsys, "merge", str(tmp_path / "runs" / "a"), "--out", str(tmp_path / "m" / "run"))
    assert status == 0, err
    assert mode(tmp_path / "m") == 0o700 and mode(tmp_path / "m" / "run" / "run.json") == 0o600


def test_probe_writes_its_json_0600(engine: Managed, tmp_path: Path, capsys) -> None:
    chain = chain_file(tmp_path, engine)
    status, _, err = main_output(capsys, "probe", "--chain", str(chain), "--route", "direct", "--probe", "sse",
                                 "--timeout", "5", "--json", str(tmp_path / "p" / "probe.json"))  # fmt: skip
    assert status in (0, 1), err
    assert mode(tmp_path / "p" / "probe.json") == 0o600 and mode(tmp_path / "p") == 0o700


def test_export_and_import_write_0600_in_0700(tmp_path: Path, capsys) -> None:
    har = tmp_path / "new" / "x.har"
    status, _, err = main_output(capsys, "export", str(EXAMPLE), "--har", str(har))
    assert status == 0, err
    assert mode(har) == 0o600 and mode(tmp_path / "new") == 0o700
    status, _, err = main_output(capsys, "import", str(har), "--out", str(tmp_path / "recs" / "r"))
    assert status == 0, err
    assert mode(tmp_path / "recs") == 0o700 and mode(tmp_path / "recs" / "r") == 0o700
    assert all(mode(p) == 0o600 for p in (tmp_path / "recs" / "r").rglob("*") if p.is_file())


def test_a_chain_urls_userinfo_is_written_nowhere(engine: Managed, tmp_path: Path, capsys) -> None:
    host = engine.url.split("://", 1)[1]
    chain = chain_file(tmp_path, engine, engine_url=f"http://alice:hunter2@{host}")
    run = tmp_path / "run"
    status, out, err = main_output(capsys, "check", str(EXAMPLE), "--chain", str(chain), "--pace", "fast",
                                   "--out", str(run), "--json", str(tmp_path / "v.json"),
                                   "--html", str(tmp_path / "v.html"))  # fmt: skip
    assert status == 0, err
    _, dry, dry_err = main_output(capsys, "replay", str(EXAMPLE), "--chain", str(chain), "--dry-run")
    written = [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p.name != "chain.toml"]
    for text in [out, err, dry, dry_err, *written]:
        assert "hunter2" not in text and "alice" not in text
    assert json.loads((run / "run.json").read_text())["chain"]["engine"] == engine.url
    assert ", Authorization, " in dry  # the userinfo is sent, as Basic authorization


def test_a_supplied_query_parameter_is_sent_on_its_route_the_rest_of_the_query_byte_for_byte(
    engine: Managed, tmp_path: Path, capsys
) -> None:
    recording = tmp_path / "rec"
    shutil.copytree(EXAMPLE, recording)
    journal = recording / "journal.jsonl"
    query = "a%20b=1;2&api_key=[redacted]&c=x+y&e=%7e"
    journal.write_text(journal.read_text().replace(
        '"url":"http://127.0.0.1:4000/v1/chat/completions"',
        f'"url":"http://127.0.0.1:4000/v1/chat/completions?{query}","redacted":["query:api_key"]'))  # fmt: skip
    chain = chain_file(tmp_path, engine, extra='[engine_options]\nquery = { api_key = "${PC_TEST_KEY}" }\n')
    os.environ["PC_TEST_KEY"] = "s3 cret/&"
    try:
        before = len(requests_seen(engine))
        status, _, err = main_output(capsys, "replay", str(recording), "--chain", str(chain), "--pace", "fast",
                                     "--route", "direct", "--route", "via:edge", "--out", str(tmp_path / "run"))  # fmt: skip
        assert status == 0, err
        _, dry, _ = main_output(capsys, "replay", str(recording), "--chain", str(chain), "--dry-run")
    finally:
        del os.environ["PC_TEST_KEY"]
    seen = wait_for_requests(engine, before + 12)[before:]
    chat = [path for path in seen if path.startswith("/v1/chat/completions")]
    # direct gets the key; via:edge (whose hop supplies none, and enters at edge) gets the engine's too, as headers merge.
    assert chat and all(p == "/v1/chat/completions?a%20b=1;2&api_key=s3%20cret%2F%26&c=x+y&e=%7e" for p in chat), chat
    assert "s3 cret" not in dry and "s3%20cret" not in dry and "api_key=[from chain file]" in dry
    assert "s3" not in (tmp_path / "run" / "run.json").read_text()


def test_minimize_writes_its_recording_and_minimized_json_0600_in_0700(
    module_engines: EngineFactory, tmp_path: Path, capsys
) -> None:
    failing = module_engines("--fault", "status:code=500", "--token-interval", "0", "--ttft-base", "0")
    # Two exchanges of the example (exported, cut to its first entries, imported): fast candidates to replay,
    # one of which minimize can remove.
    status, _, err = main_output(capsys, "export", str(EXAMPLE), "--har", str(tmp_path / "all.har"))
    assert status == 0, err
    har = json.loads((tmp_path / "all.har").read_text())
    har["log"]["entries"] = har["log"]["entries"][:2]
    (tmp_path / "one.har").write_text(json.dumps(har))
    status, _, err = main_output(capsys, "import", str(tmp_path / "one.har"), "--out", str(tmp_path / "one"))
    assert status == 0, err
    chain = tmp_path / "failing.toml"
    chain.write_text(f'engine = "{failing.url}"\n')
    out = tmp_path / "min" / "a"
    status, _, err = main_output(capsys, "minimize", str(tmp_path / "one"), "--chain", str(chain), "--route", "direct",
                                 "--budget", "12", "--pace", "fast", "--out", str(out))  # fmt: skip
    assert status == 0, err
    assert mode(out / "minimized.json") == 0o600 and mode(out / "journal.jsonl") == 0o600
    assert mode(tmp_path / "min") == 0o700 and mode(out) == 0o700
