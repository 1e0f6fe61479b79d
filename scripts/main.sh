#!/usr/bin/env bash
# The main job: set up, regenerate generated/ from specs/, build the package,
# and run every example op (on the GPU when JAX sees one, else on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
cmake -S . -B build -G Ninja -DPython_EXECUTABLE="$PWD/.venv/bin/python"
cmake --build build
PYTHONPATH="$PWD/build/python" python scripts/run_examples.py
