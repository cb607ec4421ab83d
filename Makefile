# Two commands: `make run` (the service on the embedded default) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Install torch on its own, first: a bare `torch` requirement on a machine without it
# resolves to a multi-GB CUDA build. Override (e.g. a CUDA wheel) on GPU hosts.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed-stamp
PYTEST_FLAGS ?=

.PHONY: install run test test-all lint format bench clean ui-deps metrics-deps sandbox-deps \
	services-deps

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[all,dev,plot]"
	touch $@

install: $(STAMP)

run: install sandbox-deps
	$(BIN)/ampfleet migrate
	$(BIN)/ampfleet up

# The console's browser tests drive Debian's chromium (playwright comes with the dev extra).
ui-deps: install
	test -x /usr/bin/chromium || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; }

# Ranks that run bundled code run inside Debian's bubblewrap.
sandbox-deps:
	command -v bwrap >/dev/null || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bubblewrap; }

# The test session starts PostgreSQL and Redis servers of its own (tests/support/services.py)
# from Debian's packages; no service needs to run, nor any cluster to be configured.
services-deps:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	test -z "$$missing" || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; }

# The /metrics test checks the exposition with promtool, from Debian's prometheus package
# (no smaller one carries it; without recommends it is a dozen small packages).
metrics-deps:
	command -v promtool >/dev/null || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; }

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy ampfleet

test: lint ui-deps metrics-deps sandbox-deps services-deps
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_FLAGS)

test-all: lint ui-deps metrics-deps sandbox-deps services-deps
	$(BIN)/python -m pytest $(PYTEST_FLAGS)

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache test-artifacts
