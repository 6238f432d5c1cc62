# The two commands a newcomer needs are `make test` and (once it exists) `make demo`.
# Both work on a fresh machine: they create .venv and install the package on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test sessions bench clean venv-with-apt

test: $(STAMP)
	$(BIN)/python -m pytest

# List the sessions of the example recording that ships in replays/.
sessions: $(STAMP)
	$(BIN)/proxycheck sessions replays/example-agent

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py --out benchmarks/results.json

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || $(MAKE) --no-print-directory venv-with-apt
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

# A Debian python3 without its venv module: install it when we may (CI runs as root), then retry.
venv-with-apt:
	rm -rf $(VENV)
	[ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null || { echo "python3 -m venv failed: install python3-venv" >&2; exit 1; }
	apt-get update -qq && apt-get install -y -qq python3-venv
	$(PYTHON) -m venv $(VENV)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
