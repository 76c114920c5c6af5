#!/usr/bin/env bash
# Regenerates the Python gRPC code from proto/ into schedd/v1/ (checked in).
# Usage: tools/genproto.sh [OUTDIR]   (CI runs it into a temp dir and diffs)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.}
python -m grpc_tools.protoc -Iproto --python_out="$out" --grpc_python_out="$out" --pyi_out="$out" proto/schedd/v1/*.proto
touch "$out/schedd/v1/__init__.py"
