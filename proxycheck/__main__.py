"""`python -m proxycheck` runs the command line."""

from proxycheck.cli import main

raise SystemExit(main())
