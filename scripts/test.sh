#!/usr/bin/env bash
# The whole test suite, from a fresh machine:
#   1. GoogleTest: spec reader and every error kind, opaque layout, legacy status
#      path, and generated/ == what opgen makes from specs/ (the build does NOT
#      regenerate generated/ here, so a stale commit fails the golden test);
#   2. a short libFuzzer run on the spec reader and the opaque decoder;
#   3. pip install . (scikit-build-core) into .venv;
#   4. pytest against the installed package (GPU tests skip without a GPU), then
#      the torchax tests and the multi-device tests (4 host CPU devices), each in
#      a process of its own (their conftest.py says why), and the opgen wheel
#      in a fresh virtualenv (tests/tool); then the table of eager call costs
#      on the CPU (bench/bench_torch_calls.py: printed, not asserted);
#   5. the CPU tests again against an ASan + UBSan build (scripts/sanitize.sh).
# The second stack (scripts/test_newest.sh: the package built once against the
# oldest jaxlib and torch opgen claims, the Python suites run in the newest that
# pip resolves) runs by hand, not yet here: on this 2-core machine it took 52
# minutes beside other work, and the merged tree was not yet run on it (issue 37).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

cmake -S . -B build/tests -G Ninja -DPython_EXECUTABLE="$PWD/.venv/bin/python" \
  -DOPGEN_BUILD_TESTS=ON -DOPGEN_REGENERATE=OFF
cmake --build build/tests
(cd build/tests && ctest --output-on-failure)

# libFuzzer (clang, ASan + UBSan) on the spec reader and the opaque decoder,
# OPGEN_FUZZ_SECONDS (30) each, from the seed corpora in tests/fuzz/corpus.
bash tests/fuzz/run_fuzzers.sh

# -v: CMake's configure and ninja's [n/N] lines, not minutes of silence.
python -m pip install -v --no-build-isolation -Ccmake.define.OPGEN_REGENERATE=OFF .
# Run from tests/ so that `import opgen_ops` is the installed package; the
# tests that run opgen itself use the one built above.
export OPGEN_BINARY="$PWD/build/tests/generator/opgen" OPGEN_BUILD_DIR="$PWD/build/tests"
(cd tests/python && python -m pytest -q -rs .)
(cd tests/torchax && python -m pytest -q -rs .)
(cd tests/multi_device && python -m pytest -q -rs .)
# The opgen wheel (built once, tagged manylinux) in fresh virtualenvs of this Python and of
# another version (pyenv's): opgen init, pip install, the project's own tests; a table of times.
(cd tests/tool && python -m pytest -q -rs .)
# A table, not a test: the host's cost of an eager call of each wrapper against the native op.
python bench/bench_torch_calls.py --device cpu --calls 500 --rounds 5

bash scripts/sanitize.sh

