"""The one exception tree of proxycheck, and the exit status of each kind.

Failures of the traffic under test are data (outcomes), never exceptions. Exceptions are for what
stops a command: bad input or configuration, storage or a child process failing, a failure that
does not reproduce, an interrupt. `proxycheck.cli.main` is the only place that turns them into an
exit status and prints them, as one line `proxycheck: WHERE: WHAT` (never a traceback):

    ProxycheckError                 2  (EXIT_BAD_INPUT, unless a kind says otherwise)
    ├── BadInput                    2  a file, directory or argument proxycheck cannot use
    │   └── ClientFault             2  a request the client could not send as it was built
    ├── StorageError                2  writing a recording or run failed
    ├── ProcessError                2  a managed process did not start, or died
    ├── NotReproduced               1  (EXIT_FAULT) the recorded failure never happened again
    └── Interrupted               130  (EXIT_INTERRUPTED) Ctrl-C; what was kept is said

A command's own status (0 ok, 1 a fault was found) is its return value; these constants are the
only place the numbers are written.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAULT = 1  # a fault was found (or, for minimize, there is none to minimize)
EXIT_BAD_INPUT = 2  # bad usage, configuration or input
EXIT_INTERRUPTED = 130  # as a shell reports a command that SIGINT ended


class ProxycheckError(Exception):
    """Base of every error proxycheck raises on purpose; `exit_status` is the CLI's status for it."""

    exit_status = EXIT_BAD_INPUT


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


class ProcessError(ProxycheckError):
    """A managed process did not start, or died."""


class NotReproduced(ProxycheckError):
    """The whole recording never failed on the route: nothing to minimize (exit 1, not bad input)."""

    exit_status = EXIT_FAULT


class Interrupted(ProxycheckError):
    """Ctrl-C (SIGINT) stopped a command; the message says what was kept (a run stays loadable)."""

    exit_status = EXIT_INTERRUPTED

    def __init__(self, message: str = "interrupted") -> None:
        super().__init__(message)
