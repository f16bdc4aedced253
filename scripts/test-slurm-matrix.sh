#!/usr/bin/env bash
# The contract suite on newer Slurm: for each version in SLURM_VERSIONS (default both, 24.11,26.05),
# build (once, cached; scripts/slurm-lab/root.sh) a Debian root with that Slurm, start the lab inside
# it and run tests/slurm/test_contract.py's `slurm-cli-<version>`, `slurm-ssh-<version>` (this
# host's sshd, the root's clients) and `slurm-rest-<version>` cells (slurmrestd in the root, no CLI
# fallback) against it, and tests/slurm/test_node_jobs_on_slurm.py's `slurm-cli-<version>` cell (the
# node agent's listing of its node's jobs).  22.05, the host's Slurm, is `make test`; .ci/run runs
# both side by side.
#
# The versions run side by side, one pytest each (their labs never meet: directory
# "$SLURMLAB_DIR-<version>", ports the 22.05 lab's plus 1000 (24.11) or 2000 (26.05),
# tests/slurm/conftest.py): the cells mostly wait on Slurm, and measured on the 2-core machine
# two at once took 231 s where one after the other took 321 s (docs/slurm.md).  Each version's log
# is printed when all are done, in order.  MATRIX_JUNIT=FILE runs them in one pytest instead, one
# after the other, for one JUnit XML of every cell (what docs/results/slurm-matrix.xml is).  Each
# version's build time goes to stdout, as CI's record of what the matrix costs.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${SLURM_VERSIONS:=24.11,26.05}"
if [ "$(id -u)" = 0 ] && ! command -v debootstrap >/dev/null && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
IFS=', ' read -ra versions <<<"$SLURM_VERSIONS"
for v in "${versions[@]}"; do
  t0=$(date +%s)
  bash scripts/slurm-lab/root.sh "$v" >/dev/null
  echo "test-slurm-matrix: Slurm $v root ready in $(( $(date +%s) - t0 )) s"
done
cells() { for v in "$@"; do printf ' or slurm-cli-%s or slurm-ssh-%s or slurm-rest-%s' "$v" "$v" "$v"; done; }
suite() {  # the cells of the versions given, in one pytest, then the pytest arguments after "--"
  local selected=()
  while [ "$1" != -- ]; do selected+=("$1"); shift; done
  shift
  local filter
  filter=$(cells "${selected[@]}")
  GOODPUT_SLURM_VERSIONS=$(IFS=,; echo "${selected[*]}") \
    .venv/bin/python -m pytest -q -n 0 -p no:cacheprovider tests/slurm/test_contract.py tests/slurm/test_node_jobs_on_slurm.py -k "${filter# or }" "$@"
}
if [ -n "${MATRIX_JUNIT:-}" ] || [ "${#versions[@]}" = 1 ]; then
  junit=()
  [ -z "${MATRIX_JUNIT:-}" ] || junit=("--junitxml=$MATRIX_JUNIT")
  suite "${versions[@]}" -- "${junit[@]}" "$@"
  exit
fi
logs=$(mktemp -d /tmp/goodput-slurm-matrix.XXXXXX)
pids=()
for v in "${versions[@]}"; do
  suite "$v" -- "$@" >"$logs/$v.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!versions[@]}"; do
  status=0
  wait "${pids[$i]}" || status=$?
  echo "== Slurm ${versions[$i]} cells (exit $status)"
  cat "$logs/${versions[$i]}.log"
  [ "$status" = 0 ] || rc=1
done
rm -rf "$logs"
exit "$rc"
