#!/usr/bin/env bash
# The second test stack: one package, built once against the oldest jaxlib and
# torch that opgen claims (cmake/OpgenVersions.cmake, which `opgen --version`
# names), then run, unrebuilt, against the newest jax, jaxlib, torch, torchax
# and numpy that pip resolves today (requirements-newest.txt: unpinned, so
# that the release that breaks an import is found the day it ships), in
# another Python (3.12, pyenv's; OPGEN_NEWEST_PYTHON names another). XLA's FFI
# and LibTorch's stable ABI promise that the handlers and _torch_ops.so built
# against the oldest load in the newest; this checks it. scripts/test.sh runs
# it after the first stack (Python 3.11, the oldest pins of requirements-dev.txt);
# the C++ tests, the fuzzers and the sanitizer run stay there.
#
#   bash scripts/test_newest.sh [PYTEST_ARGS...]   (given to each suite)
#
# The package is built without CUDA bodies (OPGEN_CUDA=OFF): CI has no GPU to
# run them, and the first stack compiles them. The torch wheels are PyPI's, as
# a user gets them (for Linux, CUDA builds: several GB, cached by pip). The
# tests that run opgen itself use the one the first stack built (OPGEN_BINARY,
# OPGEN_BUILD_DIR: pip's build folder of .venv's Python); they skip, saying so,
# where there is none. The scratch-project builds (a project with extra ops,
# built and tested: minutes each) run on the first stack only.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
last=$start
times=()
lap() {  # the time of the step just done, kept for the table at the end
  local now
  now=$(date +%s)
  times+=("$(printf '%-52s %5d s' "$1" $((now - last)))")
  echo "newest: $1 in $((now - last)) s"
  last=$now
}

claimed() { sed -n "s/^set($1 \([0-9.]*\))$/\1/p" cmake/OpgenVersions.cmake; }
min_jaxlib=$(claimed OPGEN_MIN_JAXLIB)
min_torch=$(claimed OPGEN_MIN_TORCH)
# The first stack tests the oldest versions claimed: its pins are those.
for pin in "jax==$min_jaxlib" "jaxlib==$min_jaxlib" "torch==$min_torch"; do
  grep -qxE "${pin//./\\.}(\.0)*" requirements-dev.txt ||
    { echo "newest: requirements-dev.txt does not pin $pin, the oldest that cmake/OpgenVersions.cmake claims"; exit 1; }
done

python=${OPGEN_NEWEST_PYTHON:-}
if [ -z "$python" ]; then
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  python=$(find "$root/versions" -maxdepth 3 -path "*/3.12.*/bin/python3" 2>/dev/null | sort -V | tail -1)
fi
[ -n "$python" ] && [ -x "$python" ] ||
  { echo "newest: no Python 3.12 (pyenv install 3.12, or set OPGEN_NEWEST_PYTHON)"; exit 1; }

# The oldest jaxlib's and torch's headers and libraries, from the first stack's
# virtualenv (.venv, scripts/setup.sh: its pins are the oldest claimed, checked
# above): read by the build, not imported (that Python is another version), so
# that they need no second download of several GB.
oldest=$(.venv/bin/python - "$min_jaxlib" "$min_torch" <<'EOF'
import os, sys
import jaxlib, torch
for name, got, want in (("jaxlib", jaxlib.__version__, sys.argv[1]), ("torch", torch.__version__, sys.argv[2])):
    assert got.split("+")[0].startswith(want), f"the first stack's {name} is {got}, not the oldest claimed, {want}"
print(os.path.join(os.path.dirname(jaxlib.__file__), "include"), os.path.dirname(torch.__file__),
      f"jaxlib {jaxlib.__version__}, torch {torch.__version__}")
EOF
) || { echo "newest: the first stack's virtualenv (.venv: bash scripts/setup.sh) lacks the oldest jaxlib and torch"; exit 1; }
read -r ffi_include torch_dir versions_oldest <<<"$oldest"

# A fresh virtualenv each run: the run sees what pip resolves today, not what
# an earlier run left.
venv=.venv-newest
rm -rf "$venv"
"$python" -m venv "$venv"
export PATH="$PWD/$venv/bin:$PATH"
python -m pip install -q --upgrade pip
# The build tools and test tools of the first stack (its pins), without its frameworks.
python -m pip install -q -r <(grep -vE '^(jax|jaxlib|torch|torch_xla|torchax)\b' requirements-dev.txt)
lap "virtualenv and build tools"

python -m pip install -v --no-build-isolation --no-deps -Ccmake.define.OPGEN_REGENERATE=OFF \
  -Ccmake.define.OPGEN_CUDA=OFF -Ccmake.define.OPGEN_XLA_FFI_INCLUDE_DIR="$ffi_include" \
  -Ccmake.define.OPGEN_TORCH_DIR="$torch_dir" -Ccmake.define.OPGEN_TORCH=ON .
built="$versions_oldest; $(python - <<'EOF'
import hashlib, importlib.util, pathlib
package = pathlib.Path(importlib.util.find_spec("opgen_ops").origin).parent
print(" ".join(f"{p.name}:{hashlib.sha256(p.read_bytes()).hexdigest()[:16]}" for p in sorted(package.glob("*.so"))))
EOF
)"
echo "newest: built against $built"
lap "package build (against the oldest)"

python -m pip install -q --upgrade --upgrade-strategy eager -r requirements-newest.txt
lap "upgrade to the newest (requirements-newest.txt)"
python -m pip list 2>/dev/null | grep -iE '^(jax|jaxlib|torch|torchax|numpy|ml.dtypes) '

# The same built files, loaded by the newest: the typed-FFI handlers and a
# legacy custom call under jax.jit, _torch_ops.so (built against the oldest
# torch) through torch.ops, each against a reference.
python - "$built" <<'EOF'
import hashlib, importlib.util, pathlib, sys
import jax, jaxlib, numpy as np, torch
import opgen_ops.jax as jops, opgen_ops.torch as tops
package = pathlib.Path(importlib.util.find_spec("opgen_ops").origin).parent
sums = " ".join(f"{p.name}:{hashlib.sha256(p.read_bytes()).hexdigest()[:16]}" for p in sorted(package.glob("*.so")))
assert sys.argv[1].endswith("; " + sums), f"the package changed since it was built: {sys.argv[1]} / {sums}"
maps = pathlib.Path("/proc/self/maps").read_text()
assert str(package / "_torch_ops.so") in maps, "_torch_ops.so is not loaded"
rng = np.random.default_rng()
a, b = rng.standard_normal((2, 64)).astype(np.float32)
for api_version in (4, 3):
    got = jax.jit(lambda a, b: jops.simple_add(a, b, alpha=0.5, api_version=api_version))(a, b)
    np.testing.assert_allclose(np.asarray(got), a + 0.5 * b, rtol=1e-6)
got = torch.ops.opgen_ops.simple_add(torch.from_numpy(a), torch.from_numpy(b), alpha=0.5)
np.testing.assert_allclose(got.numpy(), a + 0.5 * b, rtol=1e-6)
print(f"newest: the package built against {sys.argv[1].split(';')[0]} runs in jaxlib {jaxlib.__version__}, "
      f"torch {torch.__version__}")
EOF

# The tests that run opgen itself use the one the first stack built (in pip's build folder); the
# scratch-project builds, minutes each, stay on the first stack.
first=$(ls -d "build/pip-$(.venv/bin/python -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"-*/ 2>/dev/null | head -1)
export OPGEN_BINARY="${OPGEN_BINARY:-$PWD/${first}generator/opgen}" OPGEN_BUILD_DIR="${OPGEN_BUILD_DIR:-$PWD/${first%/}}"
export OPGEN_SCRATCH_BUILDS=0
(cd tests/python && python -m pytest -q -rs -n 2 --dist loadfile "$@" .)
lap "tests/python"
(cd tests/torchax && python -m pytest -q -rs "$@" .)
lap "tests/torchax"
(cd tests/multi_device && python -m pytest -q -rs "$@" .)
lap "tests/multi_device"
printf '%s\n' "${times[@]}"
echo "newest: passed in $(( $(date +%s) - start )) s"
