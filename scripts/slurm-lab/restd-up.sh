#!/bin/bash
# Start slurmrestd (JWT auth) for the running lab on 127.0.0.1:$SLURMLAB_REST_PORT and print
# shell exports for clients:   eval "$(bash scripts/slurm-lab/restd-up.sh)"
#   SLURMREST_URL, SLURMREST_USER, SLURMREST_TOKEN (a fresh JWT for root, 1 h)
# The token is deliberately not exported as SLURM_JWT: with SLURM_JWT set, sbatch/srun switch to
# auth/jwt and job steps fail.  slurmrestd refuses to run as root, so it runs as
# $SLURMLAB_REST_USER ("slurm").  Rerunning only prints fresh exports.  down.sh stops it.
# A lab inside a Debian root (up.sh --slurm 24.11|26.05) gets that root's slurmrestd, run there
# with chroot; it still listens on the host's loopback (no network namespace).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/env.sh"
unset SLURM_JWT
D=$SLURMLAB_DIR
U=$SLURMLAB_REST_USER
die() { echo "restd-up.sh: $*" >&2; exit 1; }
slurmlab_x sh -c 'command -v slurmrestd' >/dev/null ||
  die "slurmrestd not installed (install.sh --rest; in a root: root.sh installs it)"
slurmlab_running || die "no running lab in $D (run up.sh first)"
if ! uid=$(slurmlab_x id -u "$U" 2>/dev/null) || ! gid=$(slurmlab_x id -g "$U" 2>/dev/null); then
  die "user $U does not exist${SLURMLAB_CHROOT:+ in $SLURMLAB_CHROOT} (set SLURMLAB_REST_USER)"
fi
grep -q '^AuthAltTypes=auth/jwt' "$SLURM_CONF" ||
  die "the lab has no auth/jwt (install.sh --rest, then down.sh and up.sh again)"
as_user() { slurmlab_x setpriv --reuid "$uid" --regid "$gid" --clear-groups -- "$@"; }
as_user test -r "$SLURM_CONF" || die "$U cannot read $SLURM_CONF"
mkdir -p "$D/restd"
chown "$uid:$gid" "$D/restd"

if ! slurmlab_pid "$D/slurmrestd.pid" >/dev/null; then
  # whatever this Slurm offers (22.05: openapi/v0.0.36..38; 23.02+: openapi/slurmctld), minus
  # the accounting plugins: without slurmdbd slurmrestd dies at start with them
  list=$(cd "$D/restd" && as_user slurmrestd -f "$SLURM_CONF" -s list 2>&1) || true
  plugins=$(grep -oE 'openapi/[A-Za-z0-9_.]+' <<<"$list" | sort -u | { grep -vE '/(dbv|slurmdbd)' || true; } |
            paste -sd, -) || true
  [ -n "$plugins" ] || die "could not list slurmrestd plugins: $list"
  hex=$(printf ':%04X' "$SLURMLAB_REST_PORT")
  if awk -v h="$hex" '$4 == "0A" && substr($2, length($2) - 4) == h { f = 1 } END { exit !f }' /proc/net/tcp; then
    die "TCP port $SLURMLAB_REST_PORT is in use (set SLURMLAB_REST_PORT)"
  fi
  # Not listening is not free: a slurmrestd stopped moments ago leaves its connections in
  # TIME_WAIT on the port (up to 60 s), and a port in the ephemeral range (32768-60999) can be a
  # client socket's; either way the bind fails ("Address already in use"; seen with 26.05's
  # slurmrestd on port 59780).  Wait until no socket at all has it.
  port_free() { ! awk -v h="$hex" 'substr($2, length($2) - 4) == h { f = 1 } END { exit !f }' /proc/net/tcp /proc/net/tcp6; }
  slurmlab_wait 75 port_free || die "TCP port $SLURMLAB_REST_PORT still has connections after 75 s"
  # SLURM_JWT=daemon: slurmrestd forwards each client's token to slurmctld; without it every
  # request fails with "Rejecting thread config token"
  # shellcheck disable=SC2016  # $0 and $@ are the inner shell's
  ( cd "$D/restd" &&
    exec env SLURMLAB_TAG="$SLURMLAB_TAG" SLURM_CONF="$SLURM_CONF" SLURM_JWT=daemon \
      setsid ${SLURMLAB_CHROOT:+chroot "$SLURMLAB_CHROOT"} setpriv --reuid "$uid" --regid "$gid" --clear-groups -- \
      sh -c 'cd "$0" && exec "$@"' "$D/restd" \
      slurmrestd -f "$SLURM_CONF" -a rest_auth/jwt -s "$plugins" "127.0.0.1:$SLURMLAB_REST_PORT"
  ) > "$D/log/slurmrestd.log" 2>&1 < /dev/null &
  echo $! > "$D/slurmrestd.pid"
  listening() { awk -v h="$hex" '$4 == "0A" && substr($2, length($2) - 4) == h { f = 1 } END { exit !f }' /proc/net/tcp; }
  if ! slurmlab_wait 10 listening; then
    cat "$D/log/slurmrestd.log" >&2
    if p=$(slurmlab_pid "$D/slurmrestd.pid"); then kill -TERM "$p"; fi
    rm -f "$D/slurmrestd.pid"
    die "slurmrestd did not start"
  fi
fi
tok=$(slurmlab_x scontrol token username=root lifespan=3600)   # prints SLURM_JWT=...
printf 'export SLURMREST_URL=%q\n' "http://127.0.0.1:$SLURMLAB_REST_PORT"
printf 'export SLURMREST_USER=root\n'
printf 'export SLURMREST_TOKEN=%q\n' "${tok#SLURM_JWT=}"
