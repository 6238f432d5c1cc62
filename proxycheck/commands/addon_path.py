"""`proxycheck addon-path record|faults`: the path of an addon script `mitmdump -s` accepts.

For a mitmproxy installed apart from proxycheck (pipx, a distribution package): the script is the
one this installed package ships (`proxycheck/hops/scripts/`), and it imports the addon from
`proxycheck.hops`, so proxycheck must be importable by that mitmproxy's Python
(`pipx inject mitmproxy proxycheck`). Nothing is imported here: mitmproxy need not be installed
beside this command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import proxycheck
from proxycheck.core.errors import EXIT_OK, ProxycheckError

SCRIPTS = Path(proxycheck.__file__).resolve().parent / "hops" / "scripts"
ADDONS = {"record": "the recorder", "faults": "the fault hop"}


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "addon-path",
        help="print the path of the recorder or fault hop script, for mitmdump -s",
        description="Print the path of an addon script of this installed proxycheck, for "
        "`mitmdump -s PATH` (a mitmproxy installed apart, e.g. with pipx: make proxycheck importable "
        "there with `pipx inject mitmproxy proxycheck`). Exit 0, 2 bad input.",
    )
    p.add_argument("addon", choices=sorted(ADDONS), help="record: the recorder; faults: the fault hop")
    p.set_defaults(run=run)


def script_path(addon: str) -> Path:
    """The script of `addon` (`record` or `faults`) in this installed package."""
    path = SCRIPTS / f"{addon}.py"
    if not path.is_file():
        raise ProxycheckError(f"{path}: the {ADDONS[addon]} script is missing from this installation of proxycheck")
    return path


def run(args: argparse.Namespace) -> int:
    print(script_path(args.addon))
    return EXIT_OK
