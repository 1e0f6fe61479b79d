"""opgen as a kernel author gets it: the wheel built from generator/pyproject.toml is
installed into a fresh virtualenv that has never seen this repository's build tree;
`opgen init` writes a project there, `pip install` builds it, its own tests pass; adding an
attribute to its example op and rebuilding recompiles that op's files and nothing else.

Slow (the wheel and the project compile), so it runs in a pytest process of its own
(scripts/test.sh). Where the machine has no package index (the GPU machines), set
OPGEN_TEST_OFFLINE=1: the virtualenv then also sees the site-packages of the Python that
runs the tests (jax, torch; through a .pth file, as that Python may be a virtualenv itself)
and installs only the opgen wheel and what OPGEN_TEST_WHEELS (a folder) holds."""

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OFFLINE = os.environ.get("OPGEN_TEST_OFFLINE") == "1"


def run(cmd, cwd, env, expect=0):
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == expect, (f"{cmd} exited {result.returncode}:\n"
                                         f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result.stdout + result.stderr


def object_times(build):
    """Every compiled object of the project's build folder, with its modification time."""
    return {str(p.relative_to(build)): p.stat().st_mtime_ns for p in build.rglob("*.o")
            if "CompilerId" not in str(p)}


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh virtualenv with the opgen wheel and what a project build needs: its bin
    folder, the environment to run it in, and (where the machine has a package index) what
    a project build printed there before jaxlib was installed."""
    tmp = tmp_path_factory.mktemp("opgen_wheel")
    root = tmp / "venv"
    run([sys.executable, "-m", "venv", root], cwd=tmp, env=os.environ.copy())
    bin_dir = root / "bin"
    python = bin_dir / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(root), OPGEN_CACHE_DIR="")
    pip = [python, "-m", "pip", "install", "-q"]
    dist = tmp / "dist"
    build_wheel = ["-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist,
                   "-C", f"build-dir={tmp / 'build'}", REPO / "generator"]
    if OFFLINE:
        site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env).strip()
        paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
        (Path(site) / "outer_site_packages.pth").write_text("\n".join(sorted(paths)) + "\n")
        env["PIP_NO_INDEX"] = "1"
        extra = sorted(Path(os.environ["OPGEN_TEST_WHEELS"]).glob("*.whl")) if "OPGEN_TEST_WHEELS" in os.environ else []
        run([sys.executable, *build_wheel], REPO, os.environ.copy())
        run([*pip, "--no-deps", *dist.glob("opgen-*.whl"), *extra], tmp, env)
        return bin_dir, env, None

    import jax
    import jaxlib
    import pybind11
    import scikit_build_core

    # The wheel builds in a Python that has no jaxlib, torch or CUDA packages.
    run([*pip, f"scikit-build-core=={scikit_build_core.__version__}", f"pybind11=={pybind11.__version__}"], tmp, env)
    for module in ("jaxlib", "torch"):
        run([python, "-c", f"import {module}"], tmp, env, expect=1)
    run([python, *build_wheel], REPO, env)
    run([*pip, *dist.glob("opgen-*.whl")], tmp, env)
    # A package build is what needs jaxlib, and says so.
    run([bin_dir / "opgen", "init", "early"], tmp, env)
    no_jaxlib = run([*pip, "--no-build-isolation", "."], tmp / "early", env, expect=1)
    # The JAX this suite runs with, so the project builds against known FFI headers.
    run([*pip, f"jax=={jax.__version__}", f"jaxlib=={jaxlib.__version__}", "numpy", "pytest"], tmp, env)
    return bin_dir, env, no_jaxlib


def test_a_package_build_without_jaxlib_says_what_is_missing(venv):
    output = venv[2]
    if output is None:
        pytest.skip("offline: the virtualenv sees the outer Python's jaxlib")
    assert "The XLA FFI headers come from jaxlib" in output and "pip install jaxlib" in output, output[-3000:]


def test_the_command_and_its_cmake_package(venv, tmp_path):
    bin_dir, env, _ = venv
    assert re.fullmatch(r"opgen \d+\.\d+\.\d+\n", run([bin_dir / "opgen", "--version"], tmp_path, env))
    cmake_dir = Path(run([bin_dir / "opgen", "--cmake-dir"], tmp_path, env).strip())
    assert (cmake_dir / "opgenConfig.cmake").is_file()
    assert cmake_dir.is_relative_to(bin_dir.parent), "the CMake package lives in the virtualenv"
    assert run([bin_dir / "python", "-m", "opgen", "--cmake-dir"], tmp_path, env).strip() == str(cmake_dir)
    # yaml-cpp is linked into the binary: it needs no system package at run time.
    binary = cmake_dir.parents[2] / "bin" / "opgen"
    linked = run(["ldd", binary], tmp_path, env)
    assert "libpython" in linked and "yaml" not in linked, linked


def test_init_refuses_what_it_cannot_make(venv, tmp_path):
    bin_dir, env, _ = venv
    opgen = bin_dir / "opgen"
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    out = run([opgen, "init", "taken"], tmp_path, env, expect=1)
    assert "taken exists and is not an empty folder" in out
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"
    (tmp_path / "afile").write_text("mine")
    assert "afile exists and is not a folder" in run([opgen, "init", "afile"], tmp_path, env, expect=1)
    for name, why in (("Bad", "not a valid package name"), ("json", "would hide Python's standard module json"),
                      ("class", "reserved"), ("pytest", "would hide the module pytest")):
        out = run([opgen, "init", "p", "--name", name], tmp_path, env, expect=1)
        assert why in out, out
    assert not (tmp_path / "p").exists()


def test_init_project_builds_passes_its_tests_and_rebuilds_one_op(venv, tmp_path):
    bin_dir, env, _ = venv
    opgen, python = bin_dir / "opgen", bin_dir / "python"
    out = run([opgen, "init", "my-kernels"], tmp_path, env)
    project = tmp_path / "my-kernels"
    assert "holds the package my_kernels" in out
    for f in ("pyproject.toml", "CMakeLists.txt", "README.md", "specs/package.yaml", "specs/scale.yaml",
              "kernels/scale.cc", "kernels/scale.cu", "tests/test_scale.py"):
        assert (project / f).is_file(), f
    install = [python, "-m", "pip", "install", "-q", "--no-build-isolation", "."]

    run(install, project, env)
    tests = run([python, "-m", "pytest", "-q", "-rs", "tests"], project, env)
    print(tests)
    passed = int(re.search(r"(\d+) passed", tests).group(1))
    assert passed >= 4, tests  # JAX on the CPU, 3 dtypes, and the refusal

    # A second op, then an attribute added to the first: only the first recompiles.
    run([opgen, "new", "shift", "--specs", "specs", "--kernels", "kernels"], project, env)
    run(install, project, env)
    build = next((project / "build").iterdir())
    before = object_times(build)
    assert any("shift" in p for p in before) and any("runtime" in p for p in before), sorted(before)
    spec = project / "specs" / "scale.yaml"
    text = spec.read_text()
    assert "  scale: {type: f32, default: 1.0, doc: the factor}\n" in text
    spec.write_text(text.replace("  scale: {type: f32, default: 1.0, doc: the factor}\n",
                                 "  scale: {type: f32, default: 1.0, doc: the factor}\n"
                                 "  offset: {type: f32, default: 0.0, doc: not used by the body yet}\n"))
    run(install, project, env)
    after = object_times(build)
    recompiled = sorted(p for p in after if after[p] != before.get(p))
    print("recompiled after adding an attribute to scale:", *recompiled, sep="\n  ")
    assert recompiled and all("scale_" in Path(p).name for p in recompiled), recompiled
    assert set(after) == set(before)

    check = ("import inspect, numpy as np, my_kernels.jax as ops\n"
             "assert 'offset' in inspect.signature(ops.scale).parameters\n"
             "x = np.random.default_rng().standard_normal(7).astype(np.float32)\n"
             "np.testing.assert_allclose(np.asarray(ops.scale(x, scale=3.0, offset=1.0)), x * 3.0, rtol=1e-6)\n"
             "np.testing.assert_allclose(np.asarray(ops.shift(x, scale=-2.0)), x * -2.0, rtol=1e-6)\n")
    run([python, "-c", check], tmp_path, env)
    again = run([python, "-m", "pytest", "-q", "tests"], project, env)
    assert f"{passed} passed" in again, again
