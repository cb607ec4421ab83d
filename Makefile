# Two commands: `make run` (the service on the embedded default) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Install torch on its own, first: a bare `torch` requirement on a machine without it
# resolves to a multi-GB CUDA build. Override (e.g. a CUDA wheel) on GPU hosts.
TORCH_SPEC ?= torch==2.13.0
# What running needs, then what testing adds (the dev tools): `make run` stops at the first.
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
PYTEST_FLAGS ?=
# `make test` splits its run over this many processes (pytest-xdist, a module per worker at a
# time): the suite spends much of its time waiting on real processes, which another worker's
# tests fill. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2

.PHONY: install install-dev run test test-all lint format bench clean ui-deps metrics-deps \
	sandbox-deps services-deps slurm-deps sdk

define venv_with_torch
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
endef

$(RUN_STAMP): pyproject.toml
	$(venv_with_torch)
	$(BIN)/python -m pip install -q -e ".[all]"
	touch $@

# Testing installs running's extras and the dev tools in one resolver pass (a clean clone's
# `make test` would otherwise resolve and build the package twice), and so counts as installed
# for running too.
$(TEST_STAMP): pyproject.toml
	$(venv_with_torch)
	$(BIN)/python -m pip install -q -e ".[all,dev,plot]"
	touch $@ $(RUN_STAMP)

install: $(RUN_STAMP)

install-dev: $(TEST_STAMP)

# Bubblewrap only where it can be installed (root): without it the service still starts, and
# refuses bundled code at submit saying why.
NO_SANDBOX := note: bubblewrap is not installed (make sandbox-deps, as root, installs it); \
	until it is, the service refuses bundled code, saying why
run: install
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory sandbox-deps || echo "$(NO_SANDBOX)"; \
	elif ! command -v bwrap >/dev/null; then echo "$(NO_SANDBOX)"; fi
	$(BIN)/ampfleet migrate
	$(BIN)/ampfleet up

# The console's browser tests drive Debian's chromium (playwright comes with the dev extra).
ui-deps: install-dev
	test -x /usr/bin/chromium || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; }

# Ranks that run bundled code run inside Debian's bubblewrap, their network namespaces are
# set up with Debian's nftables.
sandbox-deps:
	@missing=""; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v nft >/dev/null || missing="$$missing nftables"; \
	test -z "$$missing" || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; }

# The test session starts PostgreSQL and Redis servers of its own (tests/support/services.py)
# from Debian's packages; no service needs to run, nor any cluster to be configured.
services-deps:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	test -z "$$missing" || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; }

# The Slurm backend's tests start a controller, node daemons, munge and slurmrestd of their own
# (tests/support/slurm.py) from Debian's packages; nothing is configured system-wide.
slurm-deps:
	@missing=""; \
	command -v slurmctld >/dev/null || missing="$$missing slurmctld"; \
	command -v slurmd >/dev/null || missing="$$missing slurmd"; \
	command -v slurmrestd >/dev/null || missing="$$missing slurmrestd"; \
	command -v munged >/dev/null || missing="$$missing munge"; \
	command -v sbatch >/dev/null || missing="$$missing slurm-client"; \
	test -z "$$missing" || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; }

# The /metrics test checks the exposition with promtool, from Debian's prometheus package
# (no smaller one carries it; without recommends it is a dozen small packages).
metrics-deps:
	command -v promtool >/dev/null || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; }

# mypy's incremental cache, kept per user as pip keeps its wheels, not in the checkout: a new
# clone re-checks only the files whose content differs (a clean clone's mypy took 52 s cold,
# 3 s on a cache another clone left). Entries are checked against each file's hash.
MYPY_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ampfleet/mypy

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --cache-dir "$(MYPY_CACHE)" ampfleet

test: lint ui-deps metrics-deps sandbox-deps services-deps slurm-deps
	$(BIN)/python -m pytest -m "not slow" -n $(TEST_WORKERS) --dist loadscope --durations=25 \
	  $(PYTEST_FLAGS)

test-all: lint ui-deps metrics-deps sandbox-deps services-deps slurm-deps
	$(BIN)/python -m pytest $(PYTEST_FLAGS)

# The blocking SDK client is written from the async one (tools/unasync_sdk.py).
sdk: install-dev
	$(BIN)/python tools/unasync_sdk.py

format: install-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache test-artifacts
