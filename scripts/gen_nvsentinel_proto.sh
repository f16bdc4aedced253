#!/usr/bin/env bash
# Regenerates the Python modules of NVSentinel's health-event interface from goodput's copy of
# the .proto (activities/adapters/nvsentinel/proto/health_event.proto) with the pinned
# grpcio-tools (the `dev` extra). tests/unit/test_nvsentinel_proto.py checks that the committed
# modules are what this produces.
#   scripts/gen_nvsentinel_proto.sh [OUT_ROOT]   (default: the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
OUT="${1:-.}"
PROTO=activities/adapters/nvsentinel/proto/health_event.proto
mkdir -p "$OUT/$(dirname "$PROTO")"
"$PYTHON" -m grpc_tools.protoc -I . \
  --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" "$PROTO"
