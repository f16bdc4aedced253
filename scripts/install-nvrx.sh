#!/bin/bash
# Install NVIDIA's Resiliency Extension (NVRx) for the ft_launcher tests: the unmodified files of
# one pinned release into DIR (default .venv/nvrx), usable from the repository's Python 3.11 venv.
#
#   bash scripts/install-nvrx.sh [DIR]          # PYTHON=path/to/venv/python to choose the venv
#
# Why not `pip install nvidia-resiliency-ext`: releases from 0.5 on (the ones with exit code 93,
# --ft-max-no-progress-cycles and --ft-cycle-info-dir) are published only as CPython 3.12 wheels
# for glibc >= 2.39. The package itself declares Python >= 3.10, and the one compiled module in
# the wheel (straggler detection) is not imported by ft_launcher or RankMonitorClient, so the
# wheel's files are unpacked as they are (`pip install --target --python-version 3.12 --platform`)
# and put on the venv's path with a .pth file.
#
# Dependencies: only the ones ft_launcher and RankMonitorClient import that the venv lacks
# (torch, numpy, pydantic, nvidia-ml-py, packaging and protobuf come with goodput), pinned, into
# the same DIR. The wheel's other requirements (fastapi, grpcio-tools, slowapi, uvicorn[standard])
# serve NVRx's attribution and log services, which the tests do not run; grpcio-tools would also
# pull protobuf below the version Temporal's SDK needs.
#
# Idempotent: a stamp in DIR records what is installed; a second run with the same pins does
# nothing. Removing DIR and the .pth file (or `make clean`) uninstalls it.
set -euo pipefail
cd "$(dirname "$0")/.."

NVRX_VERSION=0.7.0
NVRX_WHEEL_SHA256=e0c646ccae211de81a4c2b5bb5cff96a5e12af1373fb0eb818a40716eef685ad
DEPS=(pyyaml==6.0.4 psutil==7.2.2 defusedxml==0.7.1)

PY=${PYTHON:-.venv/bin/python}
DIR=${1:-.venv/nvrx}
[ -x "$PY" ] || { echo "install-nvrx.sh: no python at $PY (run make install first)" >&2; exit 1; }
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
STAMP="$DIR/installed"
WANT="nvidia-resiliency-ext==$NVRX_VERSION sha256:$NVRX_WHEEL_SHA256 ${DEPS[*]} python=$PY"

SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
PTH="$SITE/goodput-nvrx.pth"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -f "$PTH" ] && [ -x "$DIR/bin/ft_launcher" ]; then
  exit 0
fi

# Build the new tree beside the old one and swap it in, so a failed download leaves no half install.
NEW=$(mktemp -d "$DIR/.new.XXXXXX")
trap 'rm -rf "$NEW"' EXIT
REQ="$NEW/requirements.txt"
echo "nvidia-resiliency-ext==$NVRX_VERSION --hash=sha256:$NVRX_WHEEL_SHA256" > "$REQ"
"$PY" -m pip install -q --disable-pip-version-check --no-deps --require-hashes --target "$NEW/site" \
  --python-version 3.12 --platform manylinux_2_39_x86_64 --only-binary=:all: -r "$REQ"
"$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$NEW/site" "${DEPS[@]}"
rm -f "$REQ"

mkdir -p "$NEW/bin"
cat > "$NEW/bin/ft_launcher" <<EOF
#!$PY
# ft_launcher of nvidia-resiliency-ext $NVRX_VERSION (installed by scripts/install-nvrx.sh)
import sys

from nvidia_resiliency_ext.fault_tolerance.launcher import main

if __name__ == "__main__":
    sys.exit(main())
EOF
chmod 755 "$NEW/bin/ft_launcher"

rm -rf "$DIR/site" "$DIR/bin"
mv "$NEW/site" "$NEW/bin" "$DIR/"
echo "$DIR/site" > "$PTH"
"$PY" -c 'import nvidia_resiliency_ext.fault_tolerance as ft; ft.RankMonitorClient' \
  || { echo "install-nvrx.sh: installed, but nvidia_resiliency_ext does not import" >&2; exit 1; }
echo "$WANT" > "$STAMP"
echo "install-nvrx.sh: nvidia-resiliency-ext $NVRX_VERSION in $DIR (ft_launcher: $DIR/bin/ft_launcher)"
