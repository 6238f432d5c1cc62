"""The recorder as a mitmproxy script:

    mitmdump --mode reverse:http://127.0.0.1:30000 -s addons/record.py --set proxycheck_out=replays/mine

Options and how it uses mitmproxy's hooks: `proxycheck.hops.record`.
"""

from proxycheck.hops.record import addons  # noqa: F401
