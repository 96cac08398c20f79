# cuberay developer entry points. `make demo` and `make test` are all a newcomer needs.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# torch goes in first and pinned: this machine carries the CPU build of 2.13.0 on disk,
# while an unpinned torch (asked for by ray[train]/deepspeed) pulls a multi-GB CUDA build.
TORCH  := torch==2.13.0
PYTEST := $(BIN)/python -m pytest

.PHONY: venv demo test unit integration e2e bench lint clean

venv: $(STAMP)

# The stamp makes re-runs instant; editing pyproject.toml re-installs.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --progress-bar off -e ".[test,plot,dev]"
	touch $(STAMP)

demo: venv
	$(BIN)/cuberay demo

# Tiers run in their own pytest processes: unit tests must never see a Ray
# cluster, and the integration tier shares one cluster for its whole session.
# Every tier runs even if an earlier one fails (one CI run shows all failures);
# the target fails if any tier did. The e2e tier skips itself unless enabled
# (see tests/e2e) and goes first, so the last summary line is a tier that ran.
# The integration tier runs in one process: two local Ray clusters on one machine
# (pytest-xdist workers) confuse processes that look for "the" local cluster, and
# on 2 cores they were no faster (measured 2026-12-01: 24 min against 19).
TIERS := e2e unit integration

test: venv
	@failed=""; \
	for tier in $(TIERS); do \
	  echo "== $$tier tier =="; \
	  $(PYTEST) tests/$$tier --durations=20 || failed="$$failed $$tier"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED tiers:$$failed"; exit 1; fi

unit: venv
	$(PYTEST) tests/unit

integration: venv
	$(PYTEST) tests/integration

e2e: venv
	$(PYTEST) tests/e2e

lint: venv
	$(BIN)/ruff check cuberay tests benchmarks

bench: venv
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis benchmarks/out
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
