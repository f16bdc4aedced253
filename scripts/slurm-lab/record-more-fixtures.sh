#!/bin/bash
# Record the record kinds record-fixtures.sh leaves out, from a running lab (any version), named
# after its Slurm version: the hot-spare reservation as goodput reads it (`scontrol show
# reservation -o`) before and after goodput's updates and when there is none, a job pending on a
# dependency and a running array task (`scontrol show job -o`, and `--json` where the version has it).
#   SLURMLAB_DIR=/tmp/lab-2611 ... bash scripts/slurm-lab/record-more-fixtures.sh tests/fixtures/slurm/24.11
# It submits two jobs and an array, creates reservation goodput-spares on node4, records, then
# cancels the jobs and deletes the reservation.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/env.sh"
OUT=${1:-$HERE/../../tests/fixtures/slurm}
mkdir -p "$OUT"
slurmlab_running || { echo "record-more-fixtures.sh: no lab running in $SLURMLAB_DIR (run up.sh)" >&2; exit 1; }
V=$(slurmlab_slurm_version)
# the lab's Slurm commands, from its root when it has one (else the host's own, as they are)
if [ -n "$SLURMLAB_CHROOT" ]; then
  for c in sbatch squeue scontrol scancel; do eval "$c() { slurmlab_x $c \"\$@\"; }"; done
fi
POOL=goodput-spares
trap 'scancel $(squeue -h -o %i) 2>/dev/null || true; sleep 1; scontrol delete ReservationName=$POOL 2>/dev/null || true' EXIT
sb() { sbatch --parsable "$@" | cut -d';' -f1; }
first=$(sb --comment=goodput:opt-in -o /dev/null --wrap 'sleep 300')
dep=$(sb --comment=goodput:opt-in -o /dev/null "--dependency=afterok:$first" --wrap 'sleep 300')
array=$(sb --comment=goodput:opt-in -o /dev/null --array=0-1 --wrap 'sleep 300')
for _ in $(seq 50); do [ "$(squeue -h -j "${array}_1" -o %T 2>/dev/null)" = RUNNING ] && break; sleep 0.2; done
scontrol show job -o "$dep" > "$OUT/scontrol-job-dependency-$V.txt"
scontrol show job -o "${array}_1" > "$OUT/scontrol-job-array-task-$V.txt"
scontrol --json show job "$dep" > "$OUT/scontrol-job-dependency-$V.json" 2>/dev/null || rm -f "$OUT/scontrol-job-dependency-$V.json"
scontrol --json show job "${array}_1" > "$OUT/scontrol-job-array-task-$V.json" 2>/dev/null ||
  rm -f "$OUT/scontrol-job-array-task-$V.json"
scontrol create reservation "ReservationName=$POOL" Nodes=node4 StartTime=now Duration=infinite Users=root Flags=FLEX
scontrol show reservation -o "$POOL" > "$OUT/scontrol-reservation-$V.txt"
# what goodput does to the pool (goodput.slurm.commands): a user in, the whole node list
scontrol update "ReservationName=$POOL" Users+=goodput-alice
scontrol update "ReservationName=$POOL" Nodes=node3,node4
scontrol show reservation -o "$POOL" > "$OUT/scontrol-reservation-updated-$V.txt"
{ scontrol show reservation -o goodput-no-such-pool 2>&1 || true; } > "$OUT/scontrol-reservation-unknown-$V.txt"
echo "record-more-fixtures.sh: Slurm $V recorded into $OUT"
