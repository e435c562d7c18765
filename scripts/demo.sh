#!/usr/bin/env bash
# The main job on a fresh machine: set up the tools, then run the demo upgrade of a simulated
# three-apiserver control plane (pre-flight, migration, gated rolling upgrade, final report).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$(pwd)/.venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$(pwd)/collections"
export PYTHON="$(pwd)/.venv/bin/python"
exec bash scripts/run-demo.sh "$@"
