"""One module per subcommand. Each declares its arguments in `add_parser(commands)` and does its
work in `run(args) -> exit status`; `proxycheck.cli` lists them and owns the error handling."""
