"""The wheel: it holds the package and its addon scripts only (not the demo's output folder), and
installed into the environment of a mitmproxy that is not proxycheck's own (as `pipx inject
mitmproxy proxycheck` does), `mitmdump -s "$(proxycheck addon-path record)"` records traffic."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import mitmproxy
import pytest
from processes import EngineFactory

from proxycheck.io.procs import Managed
from proxycheck.io.storage import load

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(240)


def _run(*argv: str | Path, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the tree in which `make demo` has left its output folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "proxycheck", src / "proxycheck", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (src / "proxycheck-demo").mkdir()
    (src / "proxycheck-demo" / "agent.py").write_text("print('the demo agent')\n")
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", src, cwd=tmp)
    assert built.returncode == 0, built.stderr
    (found,) = (tmp / "dist").glob("proxycheck-*.whl")
    return found


def test_the_wheel_holds_the_package_and_its_addon_scripts_only(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
    assert [n for n in names if n.split("/")[0] not in ("proxycheck", dist_info)] == []
    assert {"proxycheck/hops/scripts/record.py", "proxycheck/hops/scripts/faults.py",
            "proxycheck/hops/record.py", "proxycheck/cli.py"} <= set(names)  # fmt: skip


def test_a_mitmproxy_of_its_own_loads_the_installed_recorder(wheel: Path, tmp_path: Path, engines: EngineFactory) -> None:
    # Another environment with mitmproxy and its dependencies but no proxycheck: a venv whose
    # site-packages reaches this one's through a .pth file (the editable install of the checkout
    # is a .pth of its own there, which Python does not follow from a directory a .pth added).
    env = tmp_path / "mitmproxy-env"
    made = _run(sys.executable, "-m", "venv", "--without-pip", env, cwd=tmp_path, timeout=60)
    assert made.returncode == 0, made.stderr
    python = env / "bin" / "python"
    site = env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "mitmproxy_deps.pth").write_text(str(Path(mitmproxy.__file__).resolve().parents[1]) + "\n")
    absent = _run(python, "-c", "import mitmproxy, proxycheck", cwd=tmp_path, timeout=60)
    assert "No module named 'proxycheck'" in absent.stderr, absent.stderr

    # `pipx inject mitmproxy proxycheck`, without the network: the wheel into that environment.
    injected = _run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", site, wheel,
                    cwd=tmp_path)  # fmt: skip
    assert injected.returncode == 0, injected.stderr
    printed = _run(python, "-m", "proxycheck", "addon-path", "record", cwd=tmp_path, timeout=60)
    assert printed.returncode == 0, printed.stderr
    script = Path(printed.stdout.strip())
    assert script == site / "proxycheck" / "hops" / "scripts" / "record.py" and script.is_file()

    engine = engines("--token-interval", "0", "--ttft-base", "0", "--ttft-per-kb", "0")
    out = tmp_path / "recording"
    argv = [str(python), "-c", "from mitmproxy.tools.main import mitmdump; mitmdump()", "--listen-host", "127.0.0.1",
            "--listen-port", "0", "--set", "flow_detail=0", "--mode", f"reverse:{engine.url}", "-s", str(script),
            "--set", f"proxycheck_out={out}"]  # fmt: skip
    hop = Managed(argv, "127.0.0.1", 0, name="mitmdump", port_pattern=r"listening at \S+:(\d+)", cwd=tmp_path)
    try:
        hop.wait_ready(60)
        body = {"model": "m", "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(timeout=20) as client:
            reply = client.post(f"{hop.url}/v1/chat/completions", content=json.dumps(body),
                                headers={"content-type": "application/json", "authorization": "Bearer sk-wheel"})
        assert reply.status_code == 200 and "[DONE]" in reply.text
        time.sleep(1.5)  # the recorder flushes its last chunks within a second
    finally:
        hop.stop()
    assert "proxycheck recorder: recording" in hop.log_tail(), hop.log_tail()
    (exchange,) = load(out).exchanges
    assert exchange.status == 200 and exchange.path == "/v1/chat/completions"
    assert "header:authorization" in exchange.redacted
    assert b"sk-wheel" not in b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
