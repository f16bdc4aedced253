# shellcheck shell=bash
# Settings and helpers shared by goodput's slurm-lab scripts.  Source it from bash:
#     . scripts/slurm-lab/env.sh      # exports SLURM_CONF (and the SLURMLAB_* knobs)
# Every knob can be set in the environment first.  Everything a lab writes (config, state,
# sockets, logs, pid files) lives under $SLURMLAB_DIR; nothing under /etc is read or written.
# The default ports differ from Slurm's (6817/6818) so the lab never meets a real cluster's
# daemons or another lab on the same machine.  Sourcing changes no shell options.

SLURMLAB_HOME=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${SLURMLAB_DIR:=/tmp/goodput-slurmlab}"

# A lab remembers the knobs it was started with ($SLURMLAB_DIR/lab.env) so that down.sh need
# not be told again.  Explicit environment values win; up.sh sets SLURMLAB_FRESH=1 so a stale
# lab.env never leaks into a new lab.
if [ "${SLURMLAB_FRESH:-0}" != 1 ] && [ -r "$SLURMLAB_DIR/lab.env" ]; then
  while IFS='=' read -r _k _v; do
    case "$_k" in
      SLURMLAB_DIR|SLURMLAB_HOME) ;;
      SLURMLAB_[A-Z_]*) [ -n "${!_k+x}" ] || printf -v "$_k" '%s' "$_v" ;;
    esac
  done < "$SLURMLAB_DIR/lab.env"
  unset _k _v
fi

: "${SLURMLAB_NODES:=4}"                 # node1..nodeN, one slurmd each
: "${SLURMLAB_CPUS:=4}"                  # advertised CPUs per node (config_overrides)
: "${SLURMLAB_MEM:=4000}"                # advertised RealMemory (MB) per node
: "${SLURMLAB_GPUS:=8}"                  # fake gres/gpu per node (0 = no GRES)
: "${SLURMLAB_UTS:=1}"                   # 1: each slurmd gets its own hostname (nodeX)
: "${SLURMLAB_CTL_PORT:=16817}"          # slurmctld
: "${SLURMLAB_SLURMD_BASEPORT:=16900}"   # nodeX's slurmd listens on BASEPORT+X
: "${SLURMLAB_REST_PORT:=16820}"         # slurmrestd, bound to 127.0.0.1
: "${SLURMLAB_REST_USER:=slurm}"         # slurmrestd refuses to run as root
: "${SLURMLAB_CRED_EXPIRE:=10}"          # requeued jobs become eligible after this + 1 s
: "${SLURMLAB_SLURMD_TIMEOUT:=20}"       # a dead slurmd -> node DOWN after about this + 20 s
: "${SLURMLAB_SLURMD_NICE:=0}"           # nice of every slurmd and what it starts (19: the compute side
                                         # takes only cycles the head node's processes leave)
: "${SLURMLAB_SWITCH:=lableaf}"           # topology.conf's one leaf switch, over every node
: "${SLURMLAB_USERS:=goodput-alice goodput-mallory}"  # unprivileged users for hostile-user tests
: "${SLURMLAB_SLURM:=host}"             # host: the installed Slurm (22.05); 24.11|26.05: a Debian root
: "${SLURMLAB_ROOTS:=/var/cache/goodput-slurmlab}"  # where root.sh caches those roots

export SLURMLAB_HOME SLURMLAB_DIR SLURMLAB_NODES SLURMLAB_CPUS SLURMLAB_MEM SLURMLAB_GPUS \
  SLURMLAB_UTS SLURMLAB_CTL_PORT SLURMLAB_SLURMD_BASEPORT SLURMLAB_REST_PORT SLURMLAB_REST_USER \
  SLURMLAB_CRED_EXPIRE SLURMLAB_SLURMD_TIMEOUT SLURMLAB_SWITCH SLURMLAB_USERS SLURMLAB_SLURM SLURMLAB_ROOTS
export SLURM_CONF="$SLURMLAB_DIR/etc/slurm.conf"

# Marker put into the environment of every daemon the lab starts.  down.sh only signals a pid
# whose /proc/PID/environ carries it, so a stale pid file can never make it kill a stranger.
SLURMLAB_TAG="$SLURMLAB_DIR"

# A lab on a newer Slurm runs every Slurm and munge binary inside its root (root.sh), with the
# lab's directory bind-mounted at the same path there, so paths in slurm.conf mean the same file
# on both sides.  `slurmlab_x CMD ...` runs CMD from the lab's Slurm, wherever that lives.
case "$SLURMLAB_SLURM" in
  host|22.05) SLURMLAB_CHROOT="" ;;   # Debian 12's own Slurm, installed by install.sh
  *) SLURMLAB_CHROOT="$SLURMLAB_ROOTS/slurm-$SLURMLAB_SLURM" ;;
esac
export SLURMLAB_CHROOT
slurmlab_x() {
  # `command`: a caller may wrap a Slurm command in a function of the same name (record-fixtures.sh)
  if [ -n "$SLURMLAB_CHROOT" ]; then chroot "$SLURMLAB_CHROOT" "$@"; else command "$@"; fi
}

# pid exists and is not a zombie (kill -0 succeeds on zombies)
slurmlab_alive() {
  [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* (.*) [ZX] ' "/proc/$1/stat" 2>/dev/null
}
slurmlab_owned() {
  slurmlab_alive "${1:-}" && grep -zqxF "SLURMLAB_TAG=$SLURMLAB_TAG" "/proc/$1/environ" 2>/dev/null
}
slurmlab_pid() {
  local p
  p=$(cat "$1" 2>/dev/null) || return 1
  slurmlab_owned "$p" && echo "$p"
}
slurmlab_running() { slurmlab_pid "$SLURMLAB_DIR/slurmctld.pid" >/dev/null; }

# "22.05" / "24.11" from the installed slurmd: daemons print -V without reading a config, while
# client commands without a config would try a DNS SRV lookup ("configless") first.
slurmlab_slurm_version() { slurmlab_x slurmd -V 2>/dev/null | awk '{print $2}' | cut -d. -f1,2; }

slurmlab_ctld_up() { grep -q 'is UP' <<<"$(slurmlab_x scontrol ping 2>/dev/null)"; }

# Start one node's slurmd (it daemonizes; pid in $SLURMLAB_DIR/slurmd-nodeX.pid).  With
# SLURMLAB_UTS=1 it runs in its own UTS + mount namespace -- never a network namespace -- so
# `hostname` in a job prints nodeX; a private /etc/hosts maps node1..N to 127.0.0.1.
slurmlab_start_slurmd() {
  local n=$1
  mkdir -p "$SLURMLAB_DIR/spool/$n"
  if [ "$SLURMLAB_UTS" = 1 ]; then
    # shellcheck disable=SC2016  # $1..$4 are expanded by sh -c
    nice -n "$SLURMLAB_SLURMD_NICE" env SLURMLAB_TAG="$SLURMLAB_TAG" SLURMLAB_NODE="$n" unshare --uts --mount -- sh -c \
      'mount --bind "$1" "$4/etc/hosts" && hostname "$2" &&
       if [ -n "$4" ]; then exec chroot "$4" slurmd -N "$2" -f "$3"; else exec slurmd -N "$2" -f "$3"; fi' \
      sh "$SLURMLAB_DIR/etc/hosts" "$n" "$SLURM_CONF" "$SLURMLAB_CHROOT"
  else
    nice -n "$SLURMLAB_SLURMD_NICE" env SLURMLAB_TAG="$SLURMLAB_TAG" SLURMLAB_NODE="$n" \
      ${SLURMLAB_CHROOT:+chroot "$SLURMLAB_CHROOT"} slurmd -N "$n" -f "$SLURM_CONF"
  fi
}

# wait up to $1 seconds for a command to succeed
slurmlab_wait() {
  local end=$(( $(date +%s) + $1 )); shift
  until "$@"; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.1; done
}

slurmlab_say() {
  local tag=$1 ms; shift
  ms=$(( ($(date +%s%N) - ${SLURMLAB_T0:-$(date +%s%N)}) / 1000000 ))
  printf '[%s %3d.%03ds] %s\n' "$tag" $((ms / 1000)) $((ms % 1000)) "$*"
}
