#!/usr/bin/env bash
# Regenerates the Python gRPC code from proto/schedd_proto/ into client/schedd_proto/ (checked in;
# the package `schedd_proto` of the schedd-client distribution, used by client, worker and daemon).
# The proto package stays `schedd.v1`: the wire names (/schedd.v1.Scheduler/...) do not change.
# Usage: tools/genproto.sh [OUTDIR]   (default: client; CI runs it into a temp dir and diffs)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-client}
mkdir -p "$out"
python -m grpc_tools.protoc -Iproto --python_out="$out" --grpc_python_out="$out" --pyi_out="$out" proto/schedd_proto/*.proto
touch "$out/schedd_proto/__init__.py"
