"""`opgen new OP` writes a spec and kernel skeletons that build as they are:
a fresh project with only package.yaml gets a new op, generates, builds (CPU,
JAX bindings) and computes the skeleton's function correctly."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
OPGEN = Path(os.environ.get("OPGEN_BINARY", REPO / "build" / "generator" / "opgen"))

pytestmark = pytest.mark.skipif(not OPGEN.exists(), reason=f"opgen is not built ({OPGEN})")


def run(cmd, cwd):
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_new_op_builds_and_runs(tmp_path):
    project = tmp_path / "project"
    for folder in ("runtime", "templates"):
        shutil.copytree(REPO / folder, project / folder)
    shutil.copy(REPO / "CMakeLists.txt", project)
    (project / "specs").mkdir()
    (project / "kernels").mkdir()
    shutil.copy(REPO / "specs" / "package.yaml", project / "specs")
    shutil.copy(REPO / "kernels" / "elementwise.h", project / "kernels")

    out = run([str(OPGEN), "new", "scale_rows", "--templates", str(project / "templates")], cwd=project)
    assert "wrote specs/scale_rows.yaml" in out and "wrote kernels/scale_rows.cu" in out
    # It never overwrites.
    again = subprocess.run([str(OPGEN), "new", "scale_rows"], cwd=project, capture_output=True, text=True)
    assert again.returncode == 1 and "exists; 'new' never overwrites a file" in again.stderr
    spec = (project / "specs" / "scale_rows.yaml").read_text()
    assert spec.count("#") > 10, "the spec skeleton explains itself"

    run([str(OPGEN), "generate", "specs", "-o", "generated", "--templates", "templates", "--quiet"], cwd=project)
    build = project / "build"
    run(["cmake", "-S", ".", "-B", str(build), "-G", "Ninja", f"-DPython_EXECUTABLE={sys.executable}",
         "-DOPGEN_REGENERATE=OFF", "-DOPGEN_CUDA=OFF", "-DOPGEN_TORCH=OFF"], cwd=project)
    run(["cmake", "--build", str(build)], cwd=project)

    x = np.random.default_rng().standard_normal((3, 16)).astype(np.float32)
    check = (
        "import sys, numpy as np, jax\n"
        "import opgen_ops.jax as ops\n"
        "x = np.load(sys.argv[1])\n"
        "out = jax.jit(lambda x: ops.scale_rows(x, scale=2.5))(x)\n"
        "np.testing.assert_allclose(np.asarray(out, np.float64), x.astype(np.float64) * 2.5, rtol=1e-6)\n"
        "print('ok', out.shape)\n"
    )
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ, PYTHONPATH=str(build / "python"))
    result = subprocess.run([sys.executable, "-c", check, str(tmp_path / "x.npy")], env=env,
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ok (3, 16)" in result.stdout


def test_new_refuses_bad_names(tmp_path):
    (tmp_path / "specs").mkdir()
    shutil.copy(REPO / "specs" / "package.yaml", tmp_path / "specs")
    for name in ("Bad", "class", "a__b"):
        result = subprocess.run([str(OPGEN), "new", name], cwd=tmp_path, capture_output=True, text=True)
        assert result.returncode == 1 and "is not a valid op name" in result.stderr


def test_new_needs_the_package_settings(tmp_path):
    result = subprocess.run([str(OPGEN), "new", "x"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 1 and "package.yaml is missing" in result.stderr
