#!/bin/bash
# Build (once) and print a Debian root holding a newer Slurm than the host's, for the lab to run
# inside with `chroot`.  Debian's own archive carries newer Slurm in later suites (trixie: 24.11,
# sid: 26.05); installing those on the bookworm host would drag in a newer libc, so they live in a
# root of their own: `debootstrap --variant=minbase`, then `apt-get install` inside it.
#
#   bash scripts/slurm-lab/root.sh 24.11      # prints the root's path on stdout (last line)
#
# The root is cached in $SLURMLAB_ROOTS/slurm-<version> (default /var/cache/goodput-slurmlab) and
# reused while its marker file names the same suite; --rebuild throws it away first.  A build goes
# into a temporary directory that is renamed into place only when complete, under a lock, so two
# labs started together build once and never see half a root.  Timings go to stderr.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/env.sh"

VERSION=${1:-}
REBUILD=0
[ "${2:-}" = --rebuild ] && REBUILD=1
case "$VERSION" in
  24.11) SUITE=trixie ;;
  26.05) SUITE=sid ;;
  *) echo "usage: root.sh 24.11|26.05 [--rebuild]" >&2; exit 2 ;;
esac
: "${SLURMLAB_ROOTS:=/var/cache/goodput-slurmlab}"
: "${SLURMLAB_MIRROR:=http://deb.debian.org/debian}"
# slurm-wlm-jwt-plugin: auth/jwt for slurmctld, so slurmrestd can pass clients' tokens on
PACKAGES="slurmctld slurmd slurmrestd slurm-wlm-jwt-plugin slurm-client munge"
ROOT=$SLURMLAB_ROOTS/slurm-$VERSION
MARK=$ROOT/.goodput-slurmlab-root
[ "$(id -u)" = 0 ] || { echo "root.sh: run as root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "root.sh: debootstrap not found (apt-get install debootstrap)" >&2; exit 1; }

# sid moves daily: the Slurm a suite installs is checked, never assumed.  A root whose Slurm is not
# $VERSION.x is refused with what to do (docs/slurm.md, "When Debian moves a suite's Slurm on").
check_slurm() {  # $1: the version `slurmd -V` printed; $2: where it came from
  case "$1" in
    "$VERSION".*) return 0 ;;
  esac
  echo "root.sh: Debian $SUITE now installs Slurm ${1:-(none)} ($2), not $VERSION.x: the matrix cell" \
       "slurm-*-$VERSION would test another release.  Pin the archive instead" \
       "(SLURMLAB_MIRROR=https://snapshot.debian.org/archive/debian/<date before the change>/" \
       "bash scripts/slurm-lab/root.sh $VERSION --rebuild) or add the new version as a cell; see" \
       "docs/slurm.md, \"When Debian moves a suite's Slurm on\"" >&2
  return 1
}

mkdir -p "$SLURMLAB_ROOTS"
exec 9>"$SLURMLAB_ROOTS/.lock-$VERSION"
flock 9
if [ "$REBUILD" = 0 ] && [ -r "$MARK" ] && grep -qx "suite=$SUITE" "$MARK"; then
  check_slurm "$(sed -n 's/^slurm=//p' "$MARK")" "$MARK" || exit 1
  # a root cached before a package joined PACKAGES gets it in place (apt adds files; a lab
  # running on the root keeps running), not a rebuild
  # shellcheck disable=SC2086,SC2016  # PACKAGES is a word list; ${...} is dpkg-query's format
  missing=$(chroot "$ROOT" dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' $PACKAGES 2>/dev/null |
            awk '$2 != "ii" { print $1 }' | paste -sd' ' -) || true
  for p in $PACKAGES; do
    chroot "$ROOT" dpkg-query -W "$p" >/dev/null 2>&1 || missing="$missing $p"
  done
  missing=$(tr ' ' '\n' <<<"$missing" | sort -u | paste -sd' ' -)
  missing=${missing# }
  if [ -n "$missing" ]; then
    T0=$(date +%s)
    # shellcheck disable=SC2086
    chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get install -y -q --no-install-recommends \
      $missing >>"$ROOT/var/log/goodput-apt.log" 2>&1 ||
      { tail -n 20 "$ROOT/var/log/goodput-apt.log" >&2; echo "root.sh: apt-get install $missing failed in $ROOT" >&2; exit 1; }
    chroot "$ROOT" apt-get clean
    echo "root.sh: added $missing to $ROOT: $(( $(date +%s) - T0 )) s" >&2
  fi
  echo "$ROOT"
  exit 0
fi
# a stale or unfinished root is replaced, never while a lab has something mounted in it
if [ -e "$ROOT" ]; then
  if awk -v r="$ROOT/" 'index($5, r) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
    echo "root.sh: $ROOT is in use by a lab (mounts inside); run its down.sh first" >&2; exit 1
  fi
  rm -rf --one-file-system "$ROOT"
fi

T0=$(date +%s)
NEW=$(mktemp -d "$SLURMLAB_ROOTS/.build-$VERSION.XXXXXX")
# mktemp makes it 0700: the root's / must let every user in (munge's postinst runs `su munge`,
# the lab submits jobs as unprivileged users), else "su: failed to execute /bin/sh: Permission denied"
chmod 755 "$NEW"
# never leave a mounted /proc behind in a failed build (rm -rf would then walk into the host's)
cleanup() {
  mountpoint -q "$NEW/proc" && umount "$NEW/proc"
  [ -d "$NEW" ] && rm -rf --one-file-system "$NEW"
  return 0
}
trap cleanup EXIT
debootstrap --variant=minbase "$SUITE" "$NEW" "$SLURMLAB_MIRROR" >"$NEW.debootstrap.log" 2>&1 || {
  tail -n 20 "$NEW.debootstrap.log" >&2; rm -f "$NEW.debootstrap.log"; exit 1; }
rm -f "$NEW.debootstrap.log"
T1=$(date +%s)
echo "root.sh: debootstrap --variant=minbase $SUITE: $((T1 - T0)) s" >&2

# Then apt inside the root.  No policy-rc.d needed: with no init system in the chroot,
# invoke-rc.d already refuses to start the daemons.
mount -t proc proc "$NEW/proc"
apt_in() {
  chroot "$NEW" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get install -y -q --no-install-recommends "$@" \
    >>"$NEW/var/log/goodput-apt.log" 2>&1 && return 0
  cp "$NEW/var/log/goodput-apt.log" "$SLURMLAB_ROOTS/failed-$VERSION-apt.log"
  grep -B 3 -A 12 -i 'error\|fail' "$NEW/var/log/goodput-apt.log" | tail -n 40 >&2
  echo "root.sh: apt-get install $* failed; log: $SLURMLAB_ROOTS/failed-$VERSION-apt.log" >&2
  return 1
}
apt_in $PACKAGES
chroot "$NEW" apt-get clean
umount "$NEW/proc"
T2=$(date +%s)
echo "root.sh: apt-get install $PACKAGES: $((T2 - T1)) s" >&2

SLURM_BUILT=$(chroot "$NEW" slurmd -V | awk '{print $2}')
check_slurm "$SLURM_BUILT" "slurmd -V in the new root; not kept" || exit 1
# a localhost the daemons can resolve
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' > "$NEW/etc/hosts"
{ echo "suite=$SUITE"; echo "slurm=$SLURM_BUILT"; echo "built=$(date -u +%FT%TZ)"
  echo "debootstrap_s=$((T1 - T0))"; echo "apt_s=$((T2 - T1))"; } > "$NEW/.goodput-slurmlab-root"
mv -T "$NEW" "$ROOT"
trap - EXIT
echo "root.sh: $ROOT ready ($(grep '^slurm=' "$MARK")), $(du -sm "$ROOT" | cut -f1) MB" >&2
echo "$ROOT"
