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
# cluster, and each integration worker shares one cluster for its whole session.
# Every tier runs even if an earlier one fails (one CI run shows all failures);
# the target fails if any tier did. The e2e tier skips itself unless enabled
# (see tests/e2e) and goes first, so the last summary line is a tier that ran.
# The integration tier runs its test files on INTEGRATION_WORKERS processes, each with a local Ray
# cluster of its own (pytest-xdist; a file stays on one worker, so its module fixtures are shared):
# most of its time is spent waiting on Ray, so two workers finish it in about two thirds of the time
# on 2 cores, but under load two timing-sensitive tests missed their deadlines, so the default is
# INTEGRATION_WORKERS=0: the tier in this process, one cluster for the whole tier.
TIERS := e2e unit integration
INTEGRATION_WORKERS ?= 0
XDIST_integration := $(if $(filter 0,$(INTEGRATION_WORKERS)),,-n $(INTEGRATION_WORKERS) --dist loadfile)

test: venv
	@failed=""; \
	for tier in $(TIERS); do \
	  echo "== $$tier tier =="; \
	  workers=""; [ "$$tier" = integration ] && workers="$(XDIST_integration)"; \
	  $(PYTEST) tests/$$tier --durations=20 $$workers || failed="$$failed $$tier"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED tiers:$$failed"; exit 1; fi

unit: venv
	$(PYTEST) tests/unit

integration: venv
	$(PYTEST) tests/integration $(XDIST_integration)

e2e: venv
	$(PYTEST) tests/e2e

lint: venv
	$(BIN)/ruff check cuberay tests benchmarks

bench: venv
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis benchmarks/out
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
