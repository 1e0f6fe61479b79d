#!/usr/bin/env bash
# The Kernel Hub test (tests/python/test_kernel_hub.py) with the CUDA variant, on a machine with
# a GPU: the package built with its CUDA bodies from the committed generated/, laid out by
# `python -m opgen.hub` as build/torch-stable-abi<torch>-cu<nvcc>-<machine>-linux/ (for torch
# 2.11 and nvcc 13.0: torch-stable-abi211-cu130-x86_64-linux), loaded by kernels as it picks a
# variant for torch's CUDA, run on the GPU (the ops, a transformers Llama whose RMSNorms the
# layer mapping replaces, in float32 and bfloat16, against the unreplaced model; the JAX half).
# Fails where a test of the file is skipped: each one runs there.
#
#   bash scripts/kernel_hub_gpu.sh        # the logs go to $OUT (else /tmp/kernel_hub_gpu)
#
# Needs nvcc, CMake, Ninja and a python3 with a torch for nvcc's CUDA (the same major version, a
# minor >= nvcc's: kernels' rule), jax, numpy and pytest. kernels and transformers come as wheels
# for that Python in .whl/ (ignored by git; scripts/kernel_hub_gpu_wheels.txt says which), installed
# with --target into $SITE (first on PYTHONPATH, so they shadow other versions there). Fetch them,
# where pip reaches PyPI, with:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
#     $(grep -E '^(kernels|transformers)==' requirements-dev.txt) -r scripts/kernel_hub_gpu_wheels.txt
#
# Environment: OUT (the logs' folder), BUILD (the build folder, build-gpu; an existing one is
# built incrementally), CUDA_ARCHS (CMAKE_CUDA_ARCHITECTURES, 90), SITE (/tmp/site), TEST_S (the
# tests' time limit, 400 s). Logs: build.log, env.txt, pytest.log, pytest.xml.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-/tmp/kernel_hub_gpu}
build=${BUILD:-build-gpu}
[[ $build = /* ]] || build=$root/$build
site=${SITE:-/tmp/site}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)

# 1. The wheels (first: without them nothing is built).
ls .whl/*.whl >/dev/null 2>&1 ||
  { echo "kernel_hub_gpu: no wheels in $root/.whl (this script's header says which)"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl

# 2. The package with its CUDA bodies, for the python3 that runs the tests.
if ! (cmake -S . -B "$build" -G Ninja -DOPGEN_REGENERATE=OFF -DOPGEN_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" -DPython_EXECUTABLE="$(command -v python3)" &&
      cmake --build "$build" -j"$(nproc)") >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "kernel_hub_gpu: the build failed ($out/build.log)"
  exit 1
fi
facts=$build/python/opgen_ops/_build.json
echo "build $(($(date +%s) - t0)) s: $(cat "$facts")"
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["cuda"] is None)' "$facts" ||
  { echo "kernel_hub_gpu: $facts says the package has no CUDA bodies"; exit 1; }

export PYTHONPATH=$site:$build/python
{
  nvidia-smi -L || true
  nvcc --version | tail -1
  python3 -c '
import importlib.metadata as md, sys, torch, jax
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpu", torch.cuda.is_available() and torch.cuda.get_device_name(), "jax", jax.__version__, jax.devices())
for name in ("kernels", "transformers", "huggingface_hub", "tokenizers", "safetensors", "numpy"):
    d = md.distribution(name)
    print(name, d.version, d.locate_file(""))'
} 2>&1 | tee "$out/env.txt"

# 3. The tests; -s prints what the kernel's process saw (the variant, the module, the errors).
set +e
(cd tests/python && timeout "${TEST_S:-400}" python3 -m pytest -v -rs -s -p no:cacheprovider \
  --junitxml="$out/pytest.xml" test_kernel_hub.py) 2>&1 | tee "$out/pytest.log"
status=${PIPESTATUS[0]}
set -e
echo "total $(($(date +%s) - t0)) s"
[ "$status" -eq 0 ] || { echo "kernel_hub_gpu: pytest failed ($status)"; exit "$status"; }
python3 - "$out/pytest.xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET

skipped = [case.get("name") for case in ET.parse(sys.argv[1]).iter("testcase") if case.find("skipped") is not None]
if skipped:
    sys.exit(f"kernel_hub_gpu: skipped here, where each test must run: {', '.join(skipped)}")
print("kernel_hub_gpu: every test ran")
EOF
