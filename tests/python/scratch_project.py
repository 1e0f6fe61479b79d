"""A scratch copy of this project, for tests that add specs and bodies to it
and build its package (test_new_op.py; test_optional_outputs.py and
test_op_state.py, through the fixture ops of tests/fixtures)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def run(cmd, cwd, env=None, timeout=900):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def copy_project(dest: Path) -> None:
    """The files git tracks (else the tree without build outputs), as a fresh checkout has them."""
    listed = run(["git", "ls-files", "-z"], REPO) if (REPO / ".git").exists() else None
    if listed is not None and listed.returncode == 0:
        for name in filter(None, listed.stdout.split("\0")):
            source = REPO / name
            if source.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest / name)
    else:
        shutil.copytree(REPO, dest, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("build", ".venv", ".git", "__pycache__", "*.egg-info"))


def configure_and_build(root: Path) -> None:
    """Configures (regenerating generated/) and builds the scratch project.
    CUDA bodies compile where nvcc is found, for the GPU this machine has, or,
    without one, for one architecture (sm_90) rather than the package's two:
    the scratch build proves that they compile, and halves what it costs.
    The second stack (scripts/test_newest.sh: OPGEN_SCRATCH_BUILDS=0) leaves
    these builds to the first: they cost it minutes of CI's 50."""
    if os.environ.get("OPGEN_SCRATCH_BUILDS") == "0":
        import pytest

        pytest.skip("scratch-project builds run on the first stack only (OPGEN_SCRATCH_BUILDS=0)")
    arch = "native" if _has_gpu() else "90"
    configure = run(["cmake", "-S", ".", "-B", "build", "-G", "Ninja", f"-DPython_EXECUTABLE={sys.executable}",
                     "-DOPGEN_REGENERATE=ON", f"-DCMAKE_CUDA_ARCHITECTURES={arch}"], root)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    build = run(["cmake", "--build", "build"], root, timeout=3600)
    assert build.returncode == 0, build.stdout[-6000:] + build.stderr[-6000:]


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and run(["nvidia-smi", "-L"], REPO).returncode == 0


def build_with_fixtures(root: Path) -> Path:
    """A scratch copy of the project at `root` with every fixture op of
    tests/fixtures/<op>/ (<op>.yaml, <op>.cc, <op>.cu, and its checks,
    check_<op>.py, as tests/python/test_<op>.py; and any other spec and
    bodies there, such as its backward op's) added, its package built
    (configure_and_build): one build serves every test of a fixture."""
    root.mkdir(parents=True)
    copy_project(root)
    for fixture in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        op = fixture.name
        for spec in sorted(fixture.glob("*.yaml")):
            shutil.copy(spec, root / "specs")
        for body in sorted([*fixture.glob("*.cc"), *fixture.glob("*.cu")]):
            shutil.copy(body, root / "kernels")
        shutil.copy(fixture / f"check_{op}.py", root / "tests" / "python" / f"test_{op}.py")
    configure_and_build(root)
    return root


def pytest_in(root: Path, *args) -> str:
    """Runs pytest in the scratch project's tests/python on its built package."""
    # Two CPU devices for the partitioner; the GPU, where there is one, as the tests find it.
    env = dict(os.environ, PYTHONPATH=str(root / "build" / "python"),
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip())
    r = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], root / "tests" / "python", env,
            timeout=3600)
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-4000:]
    assert " passed" in r.stdout, r.stdout[-3000:]
    return r.stdout


def build_rules_module(generated: Path, package: str, ops, dest: Path) -> None:
    """`<dest>/_C`: the package's extension module with its ops' rules alone
    (what `_spec.check` asks; no custom-call target, no kernel body), compiled
    from the generated headers and the runtime in a few seconds, for tests of
    a generated package that is not built (the names, the wrappers)."""
    import sysconfig

    import pybind11

    units = []
    for op in ops:
        unit = dest / f"{op}_rules_module.cc"
        # The registration a generated <op>_xla.cc makes, less its targets.
        unit.write_text(f'#include "opgen/xla_targets.h"\n#include "{package}/{op}_rules.h"\n'
                        f"namespace {{\nusing R = {package}::{op}::Rules;\n"
                        "constexpr opgen::opaque::Layout kLayout{R::kDescriptor, R::kDescriptorFields, R::kFingerprint};\n"
                        f'constexpr opgen::xla::OpTargets kOp{{"{op}", &kLayout, nullptr, 0, &opgen::check_shapes<R>}};\n'
                        "const opgen::xla::Registration kRegistration{kOp};\n}\n")
        units.append(str(unit))
    runtime = REPO / "runtime" / "src"
    sources = [runtime / f for f in ("xla_module.cc", "binder.cc", "shape_check.cc", "shape_source.cc", "opaque.cc",
                                     "footprint.cc", "xla_targets.cc", "xla_legacy_status.cc", "torch_eager.cc")]
    out = dest / f"_C{sysconfig.get_config_var('EXT_SUFFIX')}"
    cmd = ["c++", "-std=c++17", "-O0", "-shared", "-fPIC", f'-DOPGEN_PACKAGE_NAME="{package}"',
           f"-I{generated / 'include'}", f"-I{REPO / 'runtime' / 'include'}", f"-I{pybind11.get_include()}",
           f"-I{sysconfig.get_paths()['include']}", *units, *map(str, sources), "-o", str(out)]
    p = run(cmd, dest)
    assert p.returncode == 0, p.stderr[-4000:]
