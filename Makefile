# The two commands a newcomer needs are `make test` and (once it exists) `make demo`.
# Both work on a fresh machine: they create .venv and install the package on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test sessions bench clean

test: $(STAMP)
	$(BIN)/python -m pytest

# List the sessions of the example recording that ships in replays/.
sessions: $(STAMP)
	$(BIN)/proxycheck sessions replays/example-agent

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py --out benchmarks/results.json

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
