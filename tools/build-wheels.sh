#!/usr/bin/env bash
# Build the wheels of the three distributions, schedd-client (client/), schedd-worker (worker/)
# and schedd (.), into DIR (default dist/), all in ONE pip run so that schedd's dependencies on
# schedd-client and schedd-worker resolve to these local sources, never to an index.
#
#   tools/build-wheels.sh [--deps] [--out DIR] [PIP-WHEEL-OPTIONS...]
#
# --deps also puts every third-party wheel they need in DIR: a wheelhouse that installs with no
# index at all, which is the install path docs/deployment.md documents (no name of ours is ever
# looked up on PyPI, so nobody can shadow schedd-client there: dependency confusion):
#
#   pip install --no-index --find-links DIR schedd        # a node (pulls schedd-client, -worker)
#   pip install --no-index --find-links DIR schedd-worker # a worker host
#
# Without --deps: only our three wheels (install them together, by file name, with
# `pip install DIR/schedd*.whl`; pip then takes the third-party ones from the index).
set -euo pipefail
cd "$(dirname "$0")/.."
deps=(--no-deps)
out=dist
pip_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --deps) deps=() ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) pip_args+=("$1") ;;
  esac
  shift
done
python3 -m pip wheel "${deps[@]}" ${pip_args[@]+"${pip_args[@]}"} --wheel-dir "$out" ./client ./worker .
ls -1 "$out"/schedd*.whl
