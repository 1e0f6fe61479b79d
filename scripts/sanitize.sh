#!/usr/bin/env bash
# The package built with AddressSanitizer and UndefinedBehaviorSanitizer (CPU
# only: the sanitizers do not see into CUDA kernels) and the CPU test suite
# run against it. Any report fails the run. scripts/test.sh runs it; alone:
#
#   bash scripts/sanitize.sh [PYTEST_ARGS...]
#
# jaxlib, torch and Python are not built with the sanitizers, so ASan's
# runtime is preloaded, with libstdc++ after it (else ASan's __cxa_throw
# interceptor fails inside jaxlib), and leak detection is off (the
# interpreter's own allocations at exit are not opgen's).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

start=$(date +%s)
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build/sanitize -G Ninja -DPython_EXECUTABLE="$PWD/.venv/bin/python" -DOPGEN_REGENERATE=OFF \
  -DOPGEN_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_SHARED_LINKER_FLAGS="$flags" -DCMAKE_MODULE_LINKER_FLAGS="$flags" >/dev/null
export LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)"
# allocator_may_return_null: an allocation no machine can make (a refusal test asks
# for 256 TiB) fails as it does without ASan, and the refusal is tested.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:detect_odr_violation=0:allocator_may_return_null=1"
# The build imports _C once to prove it loads: with the runtime preloaded too,
# else operator new and delete may come from different libraries.
cmake --build build/sanitize
echo "sanitize: built in $(( $(date +%s) - start )) s"

export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONPATH="$PWD/build/sanitize/python" PJRT_DEVICE=CPU JAX_PLATFORMS=cpu
# The GPU tests skip; test_outside_project, test_injection, test_new_op,
# test_optional_outputs and test_op_state build with the compiler (not under
# the sanitizers: a scratch project's package, run in processes of their own)
# and are left to the main run. So is the differential test of the routes
# (test_routes.py: its fixture ops build a scratch project too, and its calls
# cost minutes of CI's 50 under the sanitizers; the attribute and input edges
# it draws meet the C++ rules here through test_attr_types.py, test_refusals.py
# and test_every_op.py).
(cd tests/python && python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --ignore=test_outside_project.py \
  --ignore=test_injection.py --ignore=test_new_op.py --ignore=test_optional_outputs.py --ignore=test_op_state.py \
  --ignore=test_routes.py "$@" .)
echo "sanitize: passed in $(( $(date +%s) - start )) s"
