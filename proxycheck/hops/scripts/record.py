"""The recorder as a mitmproxy script, from an installed proxycheck:

    mitmdump -s "$(proxycheck addon-path record)" ...

Options and how it uses mitmproxy's hooks: `proxycheck.hops.record`.
"""

import sys

try:
    from proxycheck.hops.record import addons  # noqa: F401
except ImportError as exc:
    # mitmproxy shows this message as the script's error: say how to make proxycheck importable here.
    raise ImportError(
        f"proxycheck is not importable by this mitmproxy (Python {sys.executable}): {exc}; install it into "
        "mitmproxy's environment (pipx inject mitmproxy proxycheck, or that Python's -m pip install proxycheck)"
    ) from exc
