#!/bin/bash
# Record the Slurm output goodput's parser tests read (tests/fixtures/slurm), from a running lab,
# named after the lab's Slurm version (e.g. squeue-24.11.json).  A lab on a newer Slurm (in its
# Debian root) is recorded with that root's own clients:
#   bash scripts/slurm-lab/up.sh && bash scripts/slurm-lab/record-fixtures.sh [OUTDIR]
#   SLURMLAB_DIR=/tmp/lab-2411 ... bash scripts/slurm-lab/record-fixtures.sh tests/fixtures/slurm/24.11
# It submits a few jobs, drains node3, downs node4, records, then cancels and resumes them.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/env.sh"
OUT=${1:-$HERE/../../tests/fixtures/slurm}
mkdir -p "$OUT"
slurmlab_running || { echo "record-fixtures.sh: no lab running in $SLURMLAB_DIR (run up.sh)" >&2; exit 1; }
V=$(slurmlab_slurm_version)
# the lab's Slurm commands, from its root when it has one
for c in sbatch squeue scontrol scancel sinfo; do eval "$c() { slurmlab_x $c \"\$@\"; }"; done
# inside the lab's directory: the same path exists inside a root
work=$(mktemp -d "$SLURMLAB_DIR/work/record.XXXXXX")
chmod 755 "$work"
trap 'scancel $(squeue -h -o %i) 2>/dev/null || true; scontrol update NodeName=node3,node4 State=RESUME 2>/dev/null || true; rm -rf "$work"' EXIT
cat > "$work/train.sbatch" <<'JOB'
#!/bin/bash
#SBATCH --comment=goodput:opt-in
sleep 300
JOB
sb() { sbatch --parsable "$@" | cut -d';' -f1; }
r=$(sb --requeue -N2 -p gpu --gres=gpu:1 "--comment=goodput:opt-in team=ml" -J train-llm -t 2-00:00:00 -o "$work/out-%j.log" "$work/train.sbatch")
w=$(sb --no-requeue -o /dev/null --exclude=node4 --wrap 'sleep 300')
h=$(sb --hold --requeue -N2 -o /dev/null --wrap 'sleep 300')
q=$(sb --requeue -N2 -o /dev/null --comment=goodput:opt-in --wrap 'trap "" TERM; sleep 300')
c=$(sb -o /dev/null --wrap 'sleep 300')
for _ in $(seq 50); do [ "$(squeue -h -j "$r" -o %T 2>/dev/null)" = RUNNING ] && break; sleep 0.2; done
sleep 1
scontrol requeue "$q"
scontrol show job -o "$q" > "$OUT/scontrol-job-requeue-completing-2node-$V.txt"
scancel "$c"
scontrol update NodeName=node3 State=DRAIN "Reason=goodput:inc-7f3a: xid 79 on GPU 3"
scontrol update NodeName=node4 State=DOWN "Reason=admin: fan replaced, do not use"
sleep 0.5
scontrol show job -o "$r" > "$OUT/scontrol-job-running-$V.txt"
scontrol show job -o "$w" > "$OUT/scontrol-job-wrap-excluded-$V.txt"
scontrol show job -o "$h" > "$OUT/scontrol-job-held-$V.txt"
scontrol show job -o "$c" > "$OUT/scontrol-job-cancelled-$V.txt"
scontrol show job -o > "$OUT/scontrol-jobs-all-$V.txt"
scontrol show node -o > "$OUT/scontrol-nodes-all-$V.txt"
squeue --json > "$OUT/squeue-$V.json"
sinfo --json > "$OUT/sinfo-$V.json"
scontrol --json show nodes > "$OUT/scontrol-nodes-$V.json" 2>/dev/null || rm -f "$OUT/scontrol-nodes-$V.json"
scontrol --json show job "$r" > "$OUT/scontrol-job-running-$V.json" 2>/dev/null || rm -f "$OUT/scontrol-job-running-$V.json"
scontrol --json show job "$h" > "$OUT/scontrol-job-held-$V.json" 2>/dev/null || rm -f "$OUT/scontrol-job-held-$V.json"
scontrol --json show job "$q" > "$OUT/scontrol-job-requeued-$V.json" 2>/dev/null || rm -f "$OUT/scontrol-job-requeued-$V.json"
scontrol write batch_script "$r" - > "$OUT/batch-script-running-$V.sh"
{ scontrol show job -o 99999 2>&1 || true; scontrol requeue 99999 2>&1 || true; } > "$OUT/errors-unknown-job-$V.txt"
{ scontrol show node -o nodeX 2>&1 || true; scontrol update NodeName=nodeX State=DRAIN Reason=x 2>&1 || true; } > "$OUT/errors-unknown-node-$V.txt"
scontrol requeue "$w" > "$OUT/errors-requeue-disabled-$V.txt" 2>&1 || true
echo "record-fixtures.sh: Slurm $V recorded into $OUT (paths inside point at $work)"
