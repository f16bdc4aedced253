#!/bin/bash
# Install the Debian packages goodput's Slurm lab needs (root; about 10-20 s from a cold cache).
#   install.sh            munge, slurmctld, slurmd, slurm-client
#   install.sh --rest     + slurmrestd and the JWT auth plugin
#   install.sh --ssh      + openssh-server (the SSH backend's tests start a private sshd)
#   install.sh --all      all of the above
# Debian 12 ships Slurm 22.05, Debian 13 Slurm 24.11: no version is pinned, and optional
# packages a release lacks are skipped with a warning.  A policy-rc.d (exit 101) keeps the
# packages' init scripts from starting daemons with the system-wide config.
set -euo pipefail
die() { echo "install.sh: $*" >&2; exit 1; }
usage() { sed -n '2,6s/^# \{0,1\}//p' "$0"; }
core=(munge slurmctld slurmd slurm-client)
opt=()
for a in "$@"; do
  case "$a" in
    --rest) opt+=(slurmrestd slurm-wlm-jwt-plugin) ;;
    --ssh)  opt+=(openssh-server) ;;
    --all)  opt+=(slurmrestd slurm-wlm-jwt-plugin openssh-server) ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || die "run as root"
command -v apt-get >/dev/null || die "needs apt-get (Debian)"

created_policy=0
cleanup() { if [ "$created_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi; }
trap cleanup EXIT
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  created_policy=1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
has_candidate() {
  local c
  c=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2 }')
  [ -n "$c" ] && [ "$c" != "(none)" ]
}
pkgs=()
for p in "${core[@]}"; do
  has_candidate "$p" || die "package $p is not available from the configured apt sources"
  pkgs+=("$p")
done
for p in "${opt[@]}"; do
  case " ${pkgs[*]} " in *" $p "*) continue ;; esac
  if has_candidate "$p"; then pkgs+=("$p"); else echo "install.sh: warning: $p not available here, skipped" >&2; fi
done
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" > /dev/null
dpkg-query -W -f='${Package} ${Version}\n' "${pkgs[@]}" 2>/dev/null || true
echo "install.sh: done in ${SECONDS}s"
