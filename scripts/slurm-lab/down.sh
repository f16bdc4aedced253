#!/bin/bash
# Stop the lab in $SLURMLAB_DIR.  Safe to call at any time, any number of times: with no lab,
# a stopped lab or a half-started one.  Signals only processes of this lab:
#   1. daemons named in the lab's pid files, and only if /proc/PID/environ carries the lab's
#      tag (SLURMLAB_TAG=$SLURMLAB_DIR), so a stale pid file cannot hit another process;
#   2. leftovers found in /proc/*/environ: processes carrying the tag (slurmstepd, forked by a
#      lab slurmd) and job processes (SLURM_JOB_ID plus this lab's SLURM_CONF).
# No pkill/killall.  Logs stay in $SLURMLAB_DIR/log; --purge deletes $SLURMLAB_DIR as well.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/env.sh"
D=$SLURMLAB_DIR
SLURMLAB_T0=$(date +%s%N)
say() { slurmlab_say down "$@"; }
PURGE=0
for a in "$@"; do
  case "$a" in
    --purge) PURGE=1 ;;
    *) echo "usage: down.sh [--purge]" >&2; exit 2 ;;
  esac
done

if [ ! -d "$D" ]; then say "no lab in $D"; exit 0; fi
if [ ! -e "$D/lab.env" ]; then
  echo "down.sh: $D is not a slurm-lab directory (no lab.env); nothing done" >&2
  exit 0
fi

# 1. cancel jobs first so that slurmstepd processes end cleanly (bounded wait)
if slurmlab_running; then
  ids=$(timeout 5 ${SLURMLAB_CHROOT:+chroot "$SLURMLAB_CHROOT"} squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
  if [ -n "${ids// /}" ]; then
    # shellcheck disable=SC2086
    timeout 5 ${SLURMLAB_CHROOT:+chroot "$SLURMLAB_CHROOT"} scancel $ids 2>/dev/null || true
    busy() { [ -n "$(timeout 5 ${SLURMLAB_CHROOT:+chroot "$SLURMLAB_CHROOT"} squeue -h -t R,CG,S 2>/dev/null || true)" ]; }
    for _ in $(seq 50); do busy || break; sleep 0.2; done
    say "jobs cancelled: $ids"
  fi
fi

PIDFILES=("$D/slurmrestd.pid" "$D"/slurmd-*.pid "$D/slurmctld.pid" "$D/munge/munged.pid")

# 2. daemons by pid file: restd first, munge last
pids=()
for f in "${PIDFILES[@]}"; do
  [ -e "$f" ] || continue
  if p=$(slurmlab_pid "$f"); then
    kill -TERM "$p" 2>/dev/null && pids+=("$p")
  fi
done
left=()
for _ in $(seq 100); do
  left=()
  for p in "${pids[@]}"; do slurmlab_alive "$p" && left+=("$p"); done
  [ ${#left[@]} = 0 ] && break
  sleep 0.1
done
for p in "${left[@]}"; do
  if slurmlab_owned "$p"; then echo "down.sh: SIGKILL $p"; kill -KILL "$p" 2>/dev/null || true; fi
done
say "daemons stopped: ${pids[*]:-none running}"

# 3. leftovers of this lab (never this script or its ancestors)
keep=" "
p=$$
while [ -n "$p" ] && [ "$p" != 0 ]; do
  keep+="$p "
  p=$(awk '{ sub(/^.*\) /, ""); print $2 }' "/proc/$p/stat" 2>/dev/null || true)
done
n_stray=0
for e in /proc/[0-9]*/environ; do
  p=${e#/proc/}; p=${p%/environ}
  case "$keep" in *" $p "*) continue ;; esac
  slurmlab_alive "$p" || continue
  if grep -zqxF "SLURMLAB_TAG=$SLURMLAB_TAG" "$e" 2>/dev/null ||
     { grep -zq '^SLURM_JOB_ID=' "$e" 2>/dev/null && grep -zqxF "SLURM_CONF=$SLURM_CONF" "$e" 2>/dev/null; }; then
    echo "down.sh: killing leftover pid $p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-70 || true)"
    kill -KILL "$p" 2>/dev/null || true
    n_stray=$((n_stray + 1))
  fi
done
[ "$n_stray" = 0 ] || say "killed $n_stray leftover processes"

# 4. pid files of dead processes only confuse the next run
for f in "${PIDFILES[@]}"; do
  [ -e "$f" ] || continue
  slurmlab_pid "$f" >/dev/null || rm -f "$f"
done

# 5. a lab inside a root: its directory's bind mount; /proc and /sys once no other lab uses the root
if [ -n "$SLURMLAB_CHROOT" ]; then
  R=$SLURMLAB_CHROOT
  if mountpoint -q "$R$D"; then umount "$R$D" || umount -l "$R$D"; fi
  others=$(awk -v r="$R/" 'index($5, r) == 1 && $5 != r "proc" && $5 != r "sys" { n++ } END { print n + 0 }' /proc/self/mountinfo)
  if [ "$others" = 0 ]; then
    for m in "$R/sys" "$R/proc"; do
      if mountpoint -q "$m"; then umount "$m" || umount -l "$m"; fi
    done
  fi
  say "root $R: lab directory unmounted ($others other lab mounts remain)"
fi

if [ "$PURGE" = 1 ]; then
  rm -rf "$D"
  say "purged $D"
fi
say "done"
