#!/usr/bin/env bash
# What the test suites need from Debian, installed once and in order (apt holds one lock, so two
# suites starting side by side must not both install): the Slurm, munge and sshd packages, Chromium
# and Prometheus for the console's tests, shellcheck and systemd-analyze for the head-node units,
# and debootstrap for the Slurm version matrix's roots. Only as root on Debian; a no-op when all
# are there. scripts/test.sh and .ci/run call it.
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
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v debootstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
