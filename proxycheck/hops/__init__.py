"""mitmproxy addons, the edge layer; imports mitmproxy.

Each module holds one addon class; the scripts under `addons/` only instantiate them, so
`mitmdump -s addons/NAME.py` works from a checkout, and `scripts/` holds the same for an installed
package (`proxycheck addon-path NAME` prints the path, for a mitmproxy installed apart). The addons import the pure core (and the
storage writer); nothing inside `proxycheck` imports them.
"""
