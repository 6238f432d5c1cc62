"""The fault-injecting hop as a mitmproxy script:

    mitmdump --mode reverse:http://127.0.0.1:30000 -s addons/faults.py --set proxycheck_fault_stall_after=3

Options and mechanisms: `proxycheck.hops.faults`.
"""

from proxycheck.hops.faults import Faults

addons = [Faults()]
