"""Adding an op is a spec and its bodies: in a scratch copy of this project,
a new op made up here (spec and CPU and CUDA bodies dropped into specs/ and
kernels/, no other file touched) and one scaffolded by `opgen new` build,
pass the tests every op gets from its spec (test_every_op.py), and leave the
examples runner green (it lists an op without an example). Then the new op's
CPU body defines run_cpu for one dtype only: the build fails in that body's
generated wrapper, naming the op's file and the dtype it lacks.

It builds the whole package (CUDA where nvcc is found) in about a minute or
two; it needs what the build needs (yaml-cpp, CMake, Ninja) and skips where
opgen is not built (OPGEN_BINARY, as test_injection.py).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from scratch_project import REPO, configure_and_build, copy_project, run

OPGEN = Path(os.environ.get("OPGEN_BINARY", REPO / "build" / "generator" / "opgen"))

if not OPGEN.is_file():
    pytest.skip(f"no opgen binary at {OPGEN} (build it, or set OPGEN_BINARY)", allow_module_level=True)
if not shutil.which("cmake") or not shutil.which("ninja"):
    pytest.skip("CMake and Ninja are needed to build the scratch project", allow_module_level=True)

SPEC = """\
# Gemma's logit soft-capping, made up for this test.
opgen: 1
name: softcap
doc: "out = cap * tanh(x / cap), elementwise, computed in f32."
types:
  T: [f16, bf16, f32]
inputs:
  x: {dtype: T, shape: [..., D], doc: the logits}
outputs:
  out: {dtype: T, shape: [..., D]}
attrs:
  cap: {type: f32, default: 30.0, exclusive_min: 0.0, doc: the largest magnitude out may approach}
platforms: [cuda, cpu]
xla:
  api_versions: [4, 3]
  vmap_method: broadcast_all
"""

CPU_BODY = """\
#include <cmath>

#include "opgen/elementwise.h"
#include "opgen_ops/softcap.h"

namespace opgen_ops::softcap {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  for (int64_t i = 0; i < args.batch * args.D; ++i) {
    opgen::kernels::store(args.out, i, args.cap * std::tanh(opgen::kernels::load(args.x, i) / args.cap));
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::softcap
"""

CUDA_BODY = """\
#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/softcap.h"

namespace opgen_ops::softcap {
namespace {

template <typename T>
__global__ void softcap_elements(Args<T> args) {
  const int64_t n = args.batch * args.D;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    opgen::kernels::store(args.out, i, args.cap * tanhf(opgen::kernels::load(args.x, i) / args.cap));
  }
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  const int64_t blocks = (args.batch * args.D + 255) / 256;
  softcap_elements<T><<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(args);
  return opgen::cuda_launch_status("softcap_elements");
}

}  // namespace opgen_ops::softcap
"""

# A body that defines run_cpu for f32 alone: the spec's f16 and bf16 have no definition.
CPU_BODY_FOR_F32_ONLY = """\
#include <cmath>

#include "opgen_ops/softcap.h"

namespace opgen_ops::softcap {

opgen::Status run_cpu(const Args<float>& args) {
  for (int64_t i = 0; i < args.batch * args.D; ++i) args.out[i] = args.cap * std::tanh(args.x[i] / args.cap);
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::softcap
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("scratch") / "project"
    root.mkdir()
    copy_project(root)
    before = {p.relative_to(root) for p in root.rglob("*") if p.is_file()}
    (root / "specs" / "softcap.yaml").write_text(SPEC)
    (root / "kernels" / "softcap.cc").write_text(CPU_BODY)
    (root / "kernels" / "softcap.cu").write_text(CUDA_BODY)
    scaffold = run([str(OPGEN), "new", "scaled_copy", "--specs", "specs", "--kernels", "kernels",
                    "--templates", "templates"], root)
    assert scaffold.returncode == 0, scaffold.stdout + scaffold.stderr
    configure_and_build(root)
    return root, before, scaffold.stdout


def python_env(root: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(root / "build" / "python"), JAX_PLATFORMS="cpu")


def test_the_new_ops_touch_no_other_source(project):
    root, before, _ = project
    added = {Path("specs/softcap.yaml"), Path("kernels/softcap.cc"), Path("kernels/softcap.cu"),
             Path("specs/scaled_copy.yaml"), Path("kernels/scaled_copy.cc"), Path("kernels/scaled_copy.cu")}
    now = {p.relative_to(root) for p in root.rglob("*") if p.is_file() and "build" not in p.relative_to(root).parts}
    # The build regenerated generated/ (the tool's output); every other file is as it was.
    changed = {p for p in now - before if p.parts[0] != "generated"}
    assert changed == added


def test_opgen_new_says_what_to_fill_in(project):
    _, _, said = project
    for expected in ("specs/scaled_copy.yaml", "kernels/scaled_copy.cc", "kernels/scaled_copy.cu", "run_cpu",
                     "launch_cuda", "float64 reference"):
        assert expected in said, said


def test_every_op_tests_pass_for_the_new_ops(project):
    root, _, _ = project
    r = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_every_op.py", "-k",
             "softcap or scaled_copy"], root / "tests" / "python", python_env(root))
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-4000:]
    assert " passed" in r.stdout and "softcap" not in r.stdout.split("short test summary")[-1], r.stdout[-3000:]


def test_the_examples_runner_lists_the_ops_without_an_example(project):
    root, _, _ = project
    r = run([sys.executable, "scripts/run_examples.py"], root, python_env(root))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "softcap" in r.stdout and "(no example" in r.stdout, r.stdout


def test_a_body_that_lacks_a_dtype_fails_its_own_compile(project):
    root, _, _ = project
    (root / "kernels" / "softcap.cc").write_text(CPU_BODY_FOR_F32_ONLY)
    r = run(["cmake", "--build", "build"], root)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "softcap_body_cpu.cc" in out, out[-4000:]
    assert "no definition available" in out, out[-4000:]
    assert "opgen::f16" in out, out[-4000:]  # the combination it lacks


# --- The first configure of a new op (configure only: seconds) ----------------------------------


def configure(root: Path) -> str:
    """Configures the scratch project, without CUDA (not needed to read the bodies), and returns
    what CMake said with each run of whitespace one space: CMake reflows a warning to its width,
    breaking its lines where the paths in it put the spaces."""
    r = run(["cmake", "-S", ".", "-B", "build", "-G", "Ninja", f"-DPython_EXECUTABLE={sys.executable}",
             "-DOPGEN_REGENERATE=ON", "-DOPGEN_CUDA=OFF"], root)
    assert r.returncode == 0, r.stdout + r.stderr
    return " ".join((r.stdout + r.stderr).split())


def test_the_first_configure_of_a_new_op_finds_its_spec_and_warns_of_an_orphan_body(tmp_path):
    """A spec and its bodies just added: generated/ (committed, read at configure time) does not
    list the op until the build regenerates it, yet its bodies are its spec's, not orphans. A body
    whose spec really is missing is still warned of."""
    root = tmp_path / "project"
    root.mkdir()
    copy_project(root)
    (root / "specs" / "softcap.yaml").write_text(SPEC)
    (root / "kernels" / "softcap.cc").write_text(CPU_BODY)
    (root / "kernels" / "softcap.cu").write_text(CUDA_BODY)
    (root / "kernels" / "hardcap.cc").write_text(CPU_BODY.replace("softcap", "hardcap"))
    assert "softcap" not in (root / "generated" / "opgen_package.cmake").read_text()
    said = configure(root)
    orphan = f"{root}/kernels/hardcap.cc is the body of no op: {root}/specs has no hardcap.yaml; it is not built"
    assert orphan in said, said
    assert said.count("is the body of no op") == 1, said
