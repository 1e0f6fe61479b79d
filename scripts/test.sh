#!/usr/bin/env bash
# The whole test suite, from a fresh machine:
#   1. pip install . (scikit-build-core) into .venv, its build folder (pyproject.toml's
#      build-dir) configured with the GoogleTest suite too, so that one build serves both;
#   2. GoogleTest: spec reader and every error kind, opaque layout, legacy status
#      path, and generated/ == what opgen makes from specs/ (the build does NOT
#      regenerate generated/ here, so a stale commit fails the golden test);
#   3. a short libFuzzer run on the spec reader and the opaque decoder;
#   4. pytest against the installed package (GPU tests skip without a GPU), then
#      the torchax tests and the multi-device tests (4 host CPU devices), each in
#      a process of its own (their conftest.py says why), and the opgen wheel
#      in a fresh virtualenv (tests/tool); then the table of eager call costs
#      on the CPU (bench/bench_torch_calls.py: printed, not asserted);
#   5. the CPU tests again against an ASan + UBSan build (scripts/sanitize.sh);
#   6. the second stack (scripts/test_newest.sh): the package built once against
#      the oldest jaxlib and torch opgen claims, the Python suites run in the
#      newest that pip resolves (Python 3.12).
# Each step's time is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
last=$start
times=()
lap() {  # the time of the step just done, for the table at the end
  local now
  now=$(date +%s)
  times+=("$(printf '%-40s %5d s' "$1" $((now - last)))")
  last=$now
}
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
lap "setup"

# -v: CMake's configure and ninja's [n/N] lines, not minutes of silence.
python -m pip install -v --no-build-isolation -Ccmake.define.OPGEN_REGENERATE=OFF \
  -Ccmake.define.OPGEN_BUILD_TESTS=ON .
build=$(ls -td build/pip-*/ | head -1)  # the one pip just built in (pyproject.toml's build-dir)
build=${build%/}
[ -x "$build/generator/opgen" ] || { echo "test: no opgen in pip's build folder $build (pyproject.toml's build-dir)"; exit 1; }
lap "build and pip install"
(cd "$build" && ctest --output-on-failure)
lap "ctest"

# libFuzzer (clang, ASan + UBSan) on the spec reader and the opaque decoder,
# OPGEN_FUZZ_SECONDS (30) each, from the seed corpora in tests/fuzz/corpus.
bash tests/fuzz/run_fuzzers.sh
lap "fuzzers"

# Run from tests/ so that `import opgen_ops` is the installed package; the
# tests that run opgen itself use the one built above.
export OPGEN_BINARY="$PWD/$build/generator/opgen" OPGEN_BUILD_DIR="$PWD/$build"
# Two workers (pytest-xdist), CI's two cores, each given whole files (--dist loadfile), so that
# a module's fixtures are made once; conftest.py's fixture_project is built once for both.
(cd tests/python && python -m pytest -q -rs -n 2 --dist loadfile .)
lap "tests/python"
(cd tests/torchax && python -m pytest -q -rs .)
lap "tests/torchax"
(cd tests/multi_device && python -m pytest -q -rs .)
lap "tests/multi_device"
# The opgen wheel (built once, tagged manylinux) in fresh virtualenvs of this Python and of
# another version (pyenv's): opgen init, pip install, the project's own tests; a table of times.
(cd tests/tool && python -m pytest -q -rs .)
lap "tests/tool"
# A table, not a test: the host's cost of an eager call of each wrapper against the native op.
python bench/bench_torch_calls.py --device cpu --calls 500 --rounds 5
lap "bench_torch_calls"

bash scripts/sanitize.sh
lap "sanitizers"

bash scripts/test_newest.sh
lap "second stack (newest)"
printf '%s\n' "${times[@]}"
echo "test: passed in $(( $(date +%s) - start )) s"

