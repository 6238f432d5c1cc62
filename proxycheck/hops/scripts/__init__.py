"""The addons as `mitmdump -s` scripts inside the installed package.

`proxycheck addon-path record|faults` prints the path of one of them, for a mitmproxy installed
apart from proxycheck (pipx, a distribution package) into whose environment proxycheck was
installed too (`pipx inject mitmproxy proxycheck`). Each script only imports its addon from
`proxycheck.hops`: the addons themselves cannot all be given to `-s` (docs/mitmproxy.md).
"""
