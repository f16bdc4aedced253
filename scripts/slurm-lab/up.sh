#!/bin/bash
# Bring up a throw-away multi-node Slurm cluster on this machine for goodput's tests: a private
# munged, slurmctld and SLURMLAB_NODES x `slurmd -N nodeX` (fake gpu:8 each), all talking over
# 127.0.0.1 and unix sockets.  Everything goes to $SLURMLAB_DIR (default /tmp/goodput-slurmlab).
#
#   bash scripts/slurm-lab/up.sh          # knobs: see env.sh
#   bash scripts/slurm-lab/up.sh --slurm 24.11   # the same lab on Debian trixie's Slurm, in a root
#                                                # built and cached by root.sh (26.05: sid's)
#   . scripts/slurm-lab/env.sh; sinfo     # use it
#   bash scripts/slurm-lab/down.sh        # stop it
#
# Exit status: 0 = lab up; 3 = a lab is already running in $SLURMLAB_DIR (left untouched);
# anything else = failure (whatever was started is stopped again, logs are kept).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
while [ $# -gt 0 ]; do
  case "$1" in
    --slurm) SLURMLAB_SLURM=${2:?--slurm needs 22.05, 24.11 or 26.05}; shift 2 ;;
    *) echo "usage: up.sh [--slurm 22.05|24.11|26.05]" >&2; exit 2 ;;
  esac
done
case "${SLURMLAB_SLURM:-host}" in
  host|22.05|24.11|26.05) ;;
  *) echo "up.sh: unknown Slurm '$SLURMLAB_SLURM' (22.05, 24.11 or 26.05)" >&2; exit 2 ;;
esac
SLURMLAB_FRESH=1
. "$HERE/env.sh"
unset SLURMLAB_FRESH
D=$SLURMLAB_DIR
N=$SLURMLAB_NODES
SLURMLAB_T0=$(date +%s%N)
say() { slurmlab_say up "$@"; }
die() { echo "up.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (SlurmUser=root, mknod, unshare)"
if [ -n "$SLURMLAB_CHROOT" ]; then
  # builds the root on first use (about a minute), then reuses it
  [ "$(bash "$HERE/root.sh" "$SLURMLAB_SLURM" | tail -n 1)" = "$SLURMLAB_CHROOT" ] || die "root.sh failed"
fi
for c in munged munge unmunge slurmctld slurmd scontrol sinfo; do
  slurmlab_x sh -c "command -v $c" >/dev/null || die "$c not found (run scripts/slurm-lab/install.sh as root)"
done
case "$D" in /*/*) ;; *) die "SLURMLAB_DIR must be an absolute path below a top-level directory: '$D'" ;; esac
case "$D" in *[[:space:]]*) die "SLURMLAB_DIR must not contain spaces" ;; esac
[[ "$N" =~ ^[1-9][0-9]*$ ]] || die "SLURMLAB_NODES must be a positive integer"
[[ "$SLURMLAB_GPUS" =~ ^[0-9]+$ ]] || die "SLURMLAB_GPUS must be an integer"

if slurmlab_running; then
  echo "up.sh: a lab is already running in $D (pid $(cat "$D/slurmctld.pid")); run down.sh first" >&2
  exit 3
fi
if [ -e "$D" ]; then
  if [ -e "$D/lab.env" ]; then
    "$HERE/down.sh" >/dev/null 2>&1 || true     # stale lab: stop its leftovers, then wipe
  elif [ -n "$(ls -A "$D" 2>/dev/null)" ]; then
    die "refusing to wipe $D: not empty and not a slurm-lab directory (no lab.env)"
  fi
  rm -rf "$D"
fi

# a port taken by anything (IPv4 or IPv6 listener) means another lab or a real Slurm
port_busy() {
  local hex files=()
  hex=$(printf ':%04X' "$1")
  for f in /proc/net/tcp /proc/net/tcp6; do [ -r "$f" ] && files+=("$f"); done
  awk -v h="$hex" '$4 == "0A" && substr($2, length($2) - 4) == h { found = 1 } END { exit !found }' "${files[@]}"
}
ports=("$SLURMLAB_CTL_PORT")
for i in $(seq "$N"); do ports+=($((SLURMLAB_SLURMD_BASEPORT + i))); done
for p in "${ports[@]}"; do
  ! port_busy "$p" || die "TCP port $p is already in use (another lab? change the SLURMLAB_*PORT knobs)"
done

if [ "$SLURMLAB_UTS" = 1 ] && ! unshare --uts --mount -- true 2>/dev/null; then
  echo "up.sh: unshare --uts --mount not permitted here; continuing with SLURMLAB_UTS=0" >&2
  SLURMLAB_UTS=0
fi

cleanup_on_failure() {
  local rc=$?
  if [ "$rc" != 0 ]; then
    echo "up.sh: FAILED (exit $rc); last log lines:" >&2
    tail -n 15 "$D"/log/*.log >&2 2>/dev/null || true
    "$HERE/down.sh" >&2 || true
  fi
}
trap cleanup_on_failure EXIT

mkdir -p "$D"/{etc,state,spool,log,munge,munge-key,dev,work}
chmod 755 "$D" "$D/munge" "$D/work"
if [ -n "$SLURMLAB_CHROOT" ]; then
  # the lab's directory at the same path inside the root; /proc and /sys for slurmd (shared by
  # every lab on this root; down.sh unmounts them with the last one)
  R=$SLURMLAB_CHROOT
  mkdir -p "$R$D"
  mountpoint -q "$R$D" || mount --bind "$D" "$R$D"
  mountpoint -q "$R/proc" || mount -t proc proc "$R/proc"
  mountpoint -q "$R/sys" || mount -t sysfs -o ro sysfs "$R/sys"
  say "root $R: lab directory, /proc and /sys mounted"
fi

# ------------------------------------------------------------------ unprivileged users
# Hostile-user tests submit as real, unprivileged accounts: goodput-mallory (the attacker) and
# goodput-alice (a victim). They are ordinary system users with a home of their own in the lab.
for u in $SLURMLAB_USERS; do
  if ! id -u "$u" >/dev/null 2>&1; then
    # another lab starting beside this one (CI's Slurm matrix) may create it first
    useradd --system --user-group --no-create-home --home-dir "/var/tmp/$u" --shell /bin/bash "$u" \
      || id -u "$u" >/dev/null 2>&1 || die "cannot create user $u"
  fi
  home=$(getent passwd "$u" | cut -d: -f6)
  mkdir -p "$home" "$D/work/$u"
  chown "$u:$u" "$home" "$D/work/$u"
  chmod 700 "$home"
  chmod 755 "$D/work/$u"
  # the same account, same uid, inside the root: slurmctld there resolves job owners by its passwd
  if [ -n "$SLURMLAB_CHROOT" ] && ! grep -q "^$u:" "$SLURMLAB_CHROOT/etc/passwd"; then
    getent passwd "$u" >> "$SLURMLAB_CHROOT/etc/passwd"
    getent group "$u" >> "$SLURMLAB_CHROOT/etc/group"
  fi
done
chmod 700 "$D/munge-key"
for v in $(compgen -v SLURMLAB_); do
  case "$v" in SLURMLAB_HOME|SLURMLAB_DIR|SLURMLAB_TAG|SLURMLAB_T0) continue ;; esac
  printf '%s=%s\n' "$v" "${!v}"
done > "$D/lab.env"
VERSION=$(slurmlab_slurm_version)
[ -n "$VERSION" ] || die "cannot read the Slurm version from 'slurmd -V'"
MAJOR=${VERSION%%.*}
echo "SLURMLAB_SLURM_VERSION=$VERSION" >> "$D/lab.env"

# ------------------------------------------------------------------ munge (own key + socket)
MUNGE_SOCK=$D/munge/munge.socket
slurmlab_x mungekey -c -k "$D/munge-key/munge.key" 2>/dev/null ||
  dd if=/dev/urandom of="$D/munge-key/munge.key" bs=1 count=1024 status=none
chmod 600 "$D/munge-key/munge.key"
env SLURMLAB_TAG="$SLURMLAB_TAG" ${SLURMLAB_CHROOT:+chroot "$SLURMLAB_CHROOT"} munged --force -S "$MUNGE_SOCK" --key-file="$D/munge-key/munge.key" \
  --log-file="$D/log/munged.log" --pid-file="$D/munge/munged.pid" --seed-file="$D/munge-key/munged.seed"
munge_ok() { slurmlab_x munge -S "$MUNGE_SOCK" -n 2>/dev/null | slurmlab_x unmunge -S "$MUNGE_SOCK" >/dev/null 2>&1; }
slurmlab_wait 5 munge_ok || die "munged is not answering on $MUNGE_SOCK"
say "munged up"

# ------------------------------------------------------------------ fake GPUs
# slurmd insists on one device file per GPU; a char device 1:3 (like /dev/null) passes its check
GRES_NODE=""
GRES_TYPES=""
if [ "$SLURMLAB_GPUS" -gt 0 ]; then
  last=$((SLURMLAB_GPUS - 1))
  for i in $(seq 0 "$last"); do
    mknod "$D/dev/nvidia$i" c 1 3 2>/dev/null || touch "$D/dev/nvidia$i"
  done
  gpu_files="$D/dev/nvidia[0-$last]"; [ "$last" = 0 ] && gpu_files="$D/dev/nvidia0"
  GRES_NODE="Gres=gpu:$SLURMLAB_GPUS"
  GRES_TYPES="GresTypes=gpu"
  printf 'AutoDetect=off\nNodeName=node[1-%s] Name=gpu File=%s\n' "$N" "$gpu_files" > "$D/etc/gres.conf"
fi

# ------------------------------------------------------------------ JWT key (slurmrestd)
JWT_LINES="# auth/jwt plugin not installed: no slurmrestd with JWT"
R=${SLURMLAB_CHROOT:-}
if compgen -G "$R/usr/lib*/*/slurm-wlm/auth_jwt.so" >/dev/null || compgen -G "$R/usr/lib*/slurm*/auth_jwt.so" >/dev/null; then
  dd if=/dev/urandom of="$D/etc/jwt_hs256.key" bs=32 count=1 status=none
  chmod 600 "$D/etc/jwt_hs256.key"
  JWT_LINES="AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$D/etc/jwt_hs256.key"
fi

# ------------------------------------------------------------------ goodput's prolog and epilog
# slurmd runs goodput's own scripts (deploy/slurm/) for every job, on every node at allocation.
# slurmd gives a prolog no environment of its own, so a wrapper names the lab's settings file.
# By default that points at a closed port: every lab job shows the scripts fail open, and fast;
# tests/slurm/test_prolog_epilog_on_slurm.py points it at a real push endpoint.
# A lab in a root has no prolog: the scripts live in this checkout and need curl, neither in the root.
REPO=$(cd "$HERE/../.." && pwd)
PROLOG_LINES="# no goodput prolog/epilog in a lab inside a Debian root"
[ -n "$SLURMLAB_CHROOT" ] || PROLOG_LINES="Prolog=$D/etc/goodput-prolog
Epilog=$D/etc/goodput-epilog
PrologFlags=Alloc"
for event in prolog epilog; do
  printf '#!/bin/bash\nGOODPUT_PROLOG_ENV=%q exec %q\n' "$D/etc/goodput-prolog.env" \
    "$REPO/deploy/slurm/goodput-$event.sh" > "$D/etc/goodput-$event"
  chmod 755 "$D/etc/goodput-$event"
done
printf '%s\n' "# goodput's prolog/epilog settings (deploy/slurm/goodput-prolog.sh): nobody listens on port 1" \
  "GOODPUT_PUSH_URL=http://127.0.0.1:1" "GOODPUT_PUSH_TOKEN=slurm-lab-token-nobody-listens" > "$D/etc/goodput-prolog.env"
chmod 600 "$D/etc/goodput-prolog.env"

# ------------------------------------------------------------------ slurm.conf
last_port=$((SLURMLAB_SLURMD_BASEPORT + N))
if [ "$N" = 1 ]; then nodes=node1; node_ports=$last_port
else nodes="node[1-$N]"; node_ports="[$((SLURMLAB_SLURMD_BASEPORT + 1))-$last_port]"; fi
cat > "$D/etc/slurm.conf" <<CONF
# generated by goodput scripts/slurm-lab/up.sh for Slurm $VERSION: $N nodes on 127.0.0.1
ClusterName=goodputlab
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$SLURMLAB_CTL_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire (default 120 s) is also the delay before a requeued job may start again:
# EligibleTime = requeue time + cred_expire + 1 s
AuthInfo=socket=$MUNGE_SOCK,cred_expire=$SLURMLAB_CRED_EXPIRE
CredType=cred/munge
$JWT_LINES
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# no cgroup confinement, no systemd (containers, CI VMs)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobContainerType=job_container/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# the default batch_sched_delay=3 adds about 3 s to every sbatch; with the default
# sched_interval=60 a requeued job waits up to 10 s past its EligibleTime (measured: 21 s vs 13 s)
SchedulerParameters=bf_interval=1,batch_sched_delay=0,sched_min_interval=0,sched_interval=2
# trust the configured CPUs/RealMemory, not the real hardware (else nodes go INVAL/DRAIN)
SlurmdParameters=config_overrides
JobRequeue=0
# a DOWN node that registers again becomes usable without scontrol
ReturnToService=2
SlurmdTimeout=$SLURMLAB_SLURMD_TIMEOUT
MessageTimeout=10
KillWait=5
InactiveLimit=0
# no accounting: keep finished jobs visible to scontrol/squeue for 10 min
MinJobAge=600
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$D/log/jobcomp.txt
# goodput's prolog and epilog; Alloc: every node's prolog runs when the job starts, not at its first step
$PROLOG_LINES
$GRES_TYPES
NodeName=$nodes NodeHostname=localhost NodeAddr=127.0.0.1 Port=$node_ports CPUs=$SLURMLAB_CPUS RealMemory=$SLURMLAB_MEM $GRES_NODE State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL MaxTime=INFINITE State=UP
# topology/tree with every node under one leaf switch: `scontrol show topology` has something to
# say (goodput's breaker reads switch membership from it), and one switch places jobs exactly as
# no topology does, so no other test sees a difference.
TopologyPlugin=topology/tree
CONF
printf '# generated by goodput scripts/slurm-lab/up.sh: one leaf switch over every node\nSwitchName=%s Nodes=%s\n' \
  "$SLURMLAB_SWITCH" "$nodes" > "$D/etc/topology.conf"
# Slurm >= 23.x knows CgroupPlugin=disabled; 22.05 has no such value and autodetects.
if [ "$MAJOR" -ge 23 ] 2>/dev/null; then
  echo "CgroupPlugin=disabled" > "$D/etc/cgroup.conf"
fi
if [ "$SLURMLAB_UTS" = 1 ]; then
  { cat "${SLURMLAB_CHROOT:-}/etc/hosts"; for i in $(seq "$N"); do printf '127.0.0.1 node%s\n' "$i"; done; } > "$D/etc/hosts"
fi
say "config written: $SLURM_CONF (Slurm $VERSION)"

# ------------------------------------------------------------------ slurmctld
env SLURMLAB_TAG="$SLURMLAB_TAG" ${SLURMLAB_CHROOT:+chroot "$SLURMLAB_CHROOT"} slurmctld -f "$SLURM_CONF"
slurmlab_wait 15 slurmlab_ctld_up || die "slurmctld is not answering"
say "slurmctld up (pid $(cat "$D/slurmctld.pid"))"

# ------------------------------------------------------------------ slurmd x N
for i in $(seq "$N"); do slurmlab_start_slurmd "node$i"; done
say "slurmd x$N started"

all_idle() { [ "$(slurmlab_x sinfo -h -N -o '%T' 2>/dev/null | sort -u | tr '\n' ' ')" = "idle " ]; }
if ! slurmlab_wait 30 all_idle; then
  slurmlab_x sinfo -N -l >&2 || true
  die "nodes did not become idle"
fi
say "all $N nodes idle"
slurmlab_x sinfo -N -o '%N %P %T %c %m %G'
trap - EXIT
