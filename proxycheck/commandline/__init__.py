"""What the commands share, so that no command imports another: argument types and loading a
recording for a command (`common`), the flags every replaying command takes (`flags`), and how a
check's verdict is reported in the terminal, as JSON, JUnit and HTML (`verdicts`).

Between the renderings and I/O below and the commands above: it imports `core`, `io` and
`report`, and `proxycheck.commands` imports it; nothing here imports a command.
"""
