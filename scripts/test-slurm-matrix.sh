#!/usr/bin/env bash
# The contract suite on newer Slurm: for each version in SLURM_VERSIONS (default both, 24.11,26.05), build
# (once, cached; scripts/slurm-lab/root.sh) a Debian root with that Slurm, start the lab inside
# it and run tests/slurm/test_contract.py's `slurm-cli-<version>`, `slurm-ssh-<version>` (this
# host's sshd, the root's clients) and `slurm-rest-<version>` cells (slurmrestd in the root, no CLI
# fallback) against it.  22.05, the host's Slurm, is `make test`;
# .ci/run runs both side by side.  MATRIX_JUNIT=FILE also writes pytest's JUnit XML there.
#
# The labs here never meet the 22.05 lab: their directory is "$SLURMLAB_DIR-<version>" and their
# ports the 22.05 lab's plus 1000 (24.11) or 2000 (26.05) (tests/slurm/conftest.py).  Each
# version's build time goes to stdout, as CI's record of what the matrix costs.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${SLURM_VERSIONS:=24.11,26.05}"
if [ "$(id -u)" = 0 ] && ! command -v debootstrap >/dev/null && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
cells=()
for v in ${SLURM_VERSIONS//,/ }; do
  t0=$(date +%s)
  bash scripts/slurm-lab/root.sh "$v" >/dev/null
  echo "test-slurm-matrix: Slurm $v root ready in $(( $(date +%s) - t0 )) s"
  cells+=("slurm-cli-$v" "slurm-ssh-$v" "slurm-rest-$v")
done
filter=$(printf ' or %s' "${cells[@]}"); filter=${filter# or }
export GOODPUT_SLURM_VERSIONS=${SLURM_VERSIONS// /,}
junit=()
[ -z "${MATRIX_JUNIT:-}" ] || junit=("--junitxml=$MATRIX_JUNIT")
exec .venv/bin/python -m pytest -q -n 0 -p no:cacheprovider tests/slurm/test_contract.py -k "$filter" "${junit[@]}" "$@"
