# cuberay developer entry points. `make demo` and `make test` are all a newcomer needs.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
FW     := $(VENV)/.frameworks
# torch goes in first and pinned: this machine carries the CPU build of 2.13.0 on disk,
# while an unpinned torch (asked for by ray[train]/deepspeed) pulls a multi-GB CUDA build. It goes in
# under the constraints too, so its own dependencies (filelock, ...) land at the tested versions at once
# instead of being installed newest and then downgraded.
TORCH  := torch==2.13.0
# uv installs everything after torch: it resolves against constraints.txt at once and downloads and unpacks on every
# core, where pip went one package at a time (measured 2026-12-07 on 2 cores, fresh caches, `make venv frameworks`:
# see benchmarks/RESULTS.md, "Test suite"). Pinned, like ruff, so every checkout installs the same way.
UV     := uv==0.13.10
PYTEST := $(BIN)/python -m pytest
# Bytecode for the venv's packages is compiled at install, on every core: about a thousand processes (Ray workers,
# job drivers, CLI runs) import from it during the suite. uv trusts the system's certificate store, as pip does
# here, so a network that re-signs TLS with its own authority works for both.
UV_PIP  = $(BIN)/uv pip install --python $(BIN)/python --system-certs --compile-bytecode -c constraints.txt

.PHONY: venv frameworks lock demo test unit integration e2e bench lint clean

venv: $(STAMP)

# TensorFlow, XGBoost, LightGBM, JAX and mpi4py (~700 MB installed) for the integration tier's framework
# jobs: a second stamp, so `make demo` never waits for them and `make test` installs them once.
frameworks: $(FW)

$(FW): $(STAMP)
	@start=$$(date +%s); \
	$(UV_PIP) -e ".[frameworks]" && \
	echo "frameworks installed in $$(( $$(date +%s) - start )) s"
	touch $(FW)

# The stamp makes re-runs instant; editing pyproject.toml re-installs.
# constraints.txt pins every package to the version last tested (`make lock` writes it), so the install resolves
# at once: without it, nni 3.0's filelock<3.12 cap sends pip through dozens of virtualenv releases.
$(STAMP): pyproject.toml constraints.txt
	@start=$$(date +%s); \
	{ test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); } && \
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt "$(TORCH)" "$(UV)" && \
	$(UV_PIP) -e ".[test,plot,dev]" && \
	echo "venv installed in $$(( $$(date +%s) - start )) s"
	touch $(STAMP)

# A fresh resolution of pyproject.toml's dependencies (no constraints) in a scratch venv, frozen into
# constraints.txt; review the diff, then `make venv` installs exactly that.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --upgrade pip
	.venv-lock/bin/python -m pip install --quiet "$(TORCH)"
	.venv-lock/bin/python -m pip install --quiet -e ".[test,plot,dev,frameworks]"
	{ sed -n '1,3p' constraints.txt; .venv-lock/bin/python -m pip freeze --exclude-editable; } > constraints.new
	mv constraints.new constraints.txt && rm -rf .venv-lock

demo: venv
	$(BIN)/cuberay demo

# Tiers run in their own pytest processes: unit tests must never see a Ray cluster, and the integration tier
# shares one cluster for its whole session. tests/run_suite.py runs them in two lanes side by side: the unit tier
# and then the integration tests on the session cluster in one; in the other, those marked second_lane (on a
# session cluster of that lane's own), then the integration tests that start a Ray of their own (marked own_ray).
# Every tier runs even if an earlier one fails (one CI run shows all failures); the target fails if any tier did.
# The e2e tier skips itself unless enabled (see tests/e2e) and goes first. Within a lane the tests run one at a
# time: two session clusters on one machine (pytest-xdist workers) confuse processes that look for "the" local
# cluster, and on 2 cores they were no faster (measured 2026-12-01: 24 min against 19).
test: venv frameworks
	$(BIN)/python tests/run_suite.py

unit: venv
	$(PYTEST) tests/unit

integration: venv frameworks
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
