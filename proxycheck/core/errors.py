"""The one exception tree of proxycheck.

Failures of the traffic under test are data (outcomes), never exceptions. Exceptions are for bad
input and bad configuration; the CLI prints them as one line, `proxycheck: WHERE: WHAT`, and exits
with status 2.
"""

from __future__ import annotations


class ProxycheckError(Exception):
    """Base of every error proxycheck raises on purpose."""


class BadInput(ProxycheckError):
    """A file, directory or argument that proxycheck cannot use.

    `where` names the place (a path, optionally with `:line`), so the one-line message tells the
    user which file to look at.
    """

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where
        self.message = message


class ClientFault(BadInput):
    """The client could not send a request as it was built (a header it cannot send, a URL it
    cannot use): a mistake on this side, in the chain file or the recording, found before a byte
    reached the network. Never an outcome: it is no evidence against a hop or the engine."""


class StorageError(ProxycheckError):
    """Writing a recording or run failed (unwritable directory, full disk)."""
