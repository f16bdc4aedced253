#!/bin/bash
# Install the Debian packages the console's tests drive (root): Chromium for the browser tests
# (Playwright's own browser download is unreachable; the tests launch /usr/bin/chromium) and
# Prometheus, which a test runs to scrape goodput's /metrics. A policy-rc.d (exit 101) keeps the
# prometheus package from starting a system-wide server.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "install-console-tools.sh: run as root" >&2; exit 1; }
command -v apt-get >/dev/null || { echo "install-console-tools.sh: needs apt-get (Debian)" >&2; exit 1; }
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
apt-get install -y -q --no-install-recommends chromium prometheus >/dev/null
