"""Runs every benchmark script in this folder and gathers their figures in one JSON file.

Each `bench_*.py` takes `--json FILE`; its printed table goes to the terminal as it runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results.json"))
    args = ap.parse_args()
    results: dict = {
        "taken": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"arch": platform.machine(), "python": platform.python_version(), "cpus": _cpus()},
        "benchmarks": {},
    }
    failed = 0
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            proc = subprocess.run([sys.executable, str(script), "--json", tmp.name], timeout=1800)
            if proc.returncode != 0:
                failed += 1
                continue
            results["benchmarks"][script.stem] = json.loads(Path(tmp.name).read_text())
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"figures written to {args.out}")
    return 1 if failed else 0


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    sys.exit(main())
