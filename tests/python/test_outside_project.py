"""A user's own project builds a package with an opgen installed by CMake
(`cmake --install --component tool` into a prefix) and a plain CMake build:
`opgen init` writes the project, its CMakeLists.txt finds opgen through
`-Dopgen_DIR=$(opgen --cmake-dir)`, `opgen new` adds an op whose skeletons
build as they are, and both ops compute the right values in JAX. (The wheel
and `pip install .`: tests/tool.)"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
# The build folder that holds opgen (scripts/test.sh sets it).
BUILD = Path(os.environ.get("OPGEN_BUILD_DIR", REPO / "build")).resolve()

pytestmark = pytest.mark.skipif(not (BUILD / "generator" / "opgen").exists(),
                                reason=f"opgen is not built in {BUILD}")


def run(cmd, cwd, env=None):
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("opgen_prefix")
    run(["cmake", "--install", str(BUILD), "--component", "tool", "--prefix", str(prefix)], cwd=REPO)
    assert (prefix / "bin" / "opgen").exists()
    assert (prefix / "lib" / "cmake" / "opgen" / "opgenConfig.cmake").exists()
    return prefix


def test_installed_opgen_runs_from_its_prefix(prefix, tmp_path):
    # The installed binary finds its own templates (share/opgen/templates) and CMake package.
    opgen = str(prefix / "bin" / "opgen")
    assert run([opgen, "--cmake-dir"], cwd=tmp_path).strip() == str(prefix / "lib" / "cmake" / "opgen")
    out = run([opgen, "init", "proj", "--name", "my_ops"], cwd=tmp_path)
    assert "wrote proj/specs/scale.yaml" in out
    assert "namespace my_ops::scale" in (tmp_path / "proj" / "kernels" / "scale.cc").read_text()


def test_outside_project_with_a_new_op(prefix, tmp_path):
    project = tmp_path / "project"
    opgen = str(prefix / "bin" / "opgen")
    run([opgen, "init", str(project), "--name", "my_ops"], cwd=tmp_path)

    out = run([opgen, "new", "scale_rows"], cwd=project)
    assert "wrote specs/scale_rows.yaml" in out and "wrote kernels/scale_rows.cu" in out
    again = subprocess.run([opgen, "new", "scale_rows"], cwd=project, capture_output=True, text=True)
    assert again.returncode == 1 and "exists; opgen never overwrites a file" in again.stderr
    assert (project / "specs" / "scale_rows.yaml").read_text().count("#") > 10, "the skeleton explains itself"

    build = project / "build"
    cmake_dir = run([opgen, "--cmake-dir"], cwd=project).strip()
    run(["cmake", "-S", ".", "-B", str(build), "-G", "Ninja", f"-Dopgen_DIR={cmake_dir}",
         f"-DPython_EXECUTABLE={sys.executable}", "-DOPGEN_CUDA=OFF", "-DOPGEN_TORCH=OFF"], cwd=project)
    run(["cmake", "--build", str(build)], cwd=project)
    assert not (project / "generated").exists(), "an outside project generates into its build folder"

    rng = np.random.default_rng()
    np.save(tmp_path / "x.npy", rng.standard_normal((3, 16)).astype(np.float32))
    check = (
        "import sys, numpy as np, jax\n"
        "import my_ops.jax as ops\n"
        # The project is built without CUDA: run on the CPU even where JAX sees a GPU.
        "cpu = jax.devices('cpu')[0]\n"
        "x = jax.device_put(np.load(sys.argv[1]), cpu)\n"
        "out = jax.jit(lambda x: ops.scale_rows(x, scale=2.5))(x)\n"
        "x64 = np.asarray(x, np.float64)\n"
        "np.testing.assert_allclose(np.asarray(out, np.float64), x64 * 2.5, rtol=1e-6)\n"
        "z = jax.jit(lambda x: ops.scale(x, scale=-0.5))(x)\n"
        "np.testing.assert_allclose(np.asarray(z, np.float64), -0.5 * x64, rtol=1e-6)\n"
        "print('ok', out.shape, z.shape)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(build / "python"))
    out = run([sys.executable, "-c", check, str(tmp_path / "x.npy")], cwd=tmp_path, env=env)
    assert "ok (3, 16) (3, 16)" in out

    # Editing a spec and rebuilding regenerates in the build folder.
    spec = project / "specs" / "scale_rows.yaml"
    spec.write_text(spec.read_text().replace("default: 1.0", "default: 3.0"))
    rebuilt = run(["cmake", "--build", str(build)], cwd=project)
    assert "opgen: generating my_ops" in rebuilt


def test_new_refuses_bad_names_and_missing_package(prefix, tmp_path):
    opgen = str(prefix / "bin" / "opgen")
    result = subprocess.run([opgen, "new", "x"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 1 and "package.yaml is missing" in result.stderr
    (tmp_path / "specs").mkdir()
    shutil.copy(REPO / "specs" / "package.yaml", tmp_path / "specs")
    for name in ("Bad", "class", "a__b"):
        result = subprocess.run([opgen, "new", name], cwd=tmp_path, capture_output=True, text=True)
        assert result.returncode == 1 and "is not a valid op name" in result.stderr


def test_new_counts_a_dangling_link_as_a_file(prefix, tmp_path):
    # Any directory entry is taken: a link to nowhere is neither replaced nor written through.
    opgen = str(prefix / "bin" / "opgen")
    (tmp_path / "specs").mkdir()
    (tmp_path / "kernels").mkdir()
    shutil.copy(REPO / "specs" / "package.yaml", tmp_path / "specs")
    link = tmp_path / "kernels" / "gather.cu"
    link.symlink_to(tmp_path / "nowhere.cu")
    result = subprocess.run([opgen, "new", "gather"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 1 and "kernels/gather.cu exists; opgen never overwrites a file" in result.stderr
    assert link.is_symlink() and not (tmp_path / "nowhere.cu").exists()
    assert not (tmp_path / "specs" / "gather.yaml").exists(), "nothing is written when one file is taken"


def test_new_checks_every_destination_before_writing(prefix, tmp_path):
    # A kernels folder that cannot be made (a link to nowhere, a file): refused before the spec
    # is written, so that the same command succeeds once the folder is fixed.
    opgen = str(prefix / "bin" / "opgen")
    (tmp_path / "specs").mkdir()
    shutil.copy(REPO / "specs" / "package.yaml", tmp_path / "specs")
    link = tmp_path / "kernels_link"
    link.symlink_to(tmp_path / "nowhere")
    cmd = [opgen, "new", "gather", "--kernels", "kernels_link"]
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 1, result.stdout
    assert ("kernels_link is a symbolic link to nowhere, in the way of a folder that opgen writes into"
            in result.stderr), result.stderr
    assert "wrote" not in result.stdout
    assert not (tmp_path / "specs" / "gather.yaml").exists(), "nothing is written when a folder cannot be made"
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()
    (tmp_path / "kernels_file").write_text("mine\n")
    result = subprocess.run([opgen, "new", "gather", "--kernels", "kernels_file/sub"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 1 and ("kernels_file is in the way of a folder that opgen writes into (it is "
                                       "not a folder)") in result.stderr, result.stderr
    assert not (tmp_path / "specs" / "gather.yaml").exists()
    link.unlink()
    (tmp_path / "nowhere").mkdir()
    link.symlink_to(tmp_path / "nowhere")
    out = run(cmd, cwd=tmp_path)
    assert "wrote specs/gather.yaml" in out and (tmp_path / "nowhere" / "gather.cu").exists()


def test_init_into_a_link_to_nowhere_writes_nothing(prefix, tmp_path):
    opgen = str(prefix / "bin" / "opgen")
    (tmp_path / "proj").symlink_to(tmp_path / "nowhere")
    result = subprocess.run([opgen, "init", "proj"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 1, result.stdout
    assert "proj is a symbolic link to nowhere" in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]


def test_init_names_its_example_op_apart_from_the_package(prefix, tmp_path):
    # A package named like the example op: the op is named apart, and the project checks.
    opgen = str(prefix / "bin" / "opgen")
    out = run([opgen, "init", "scale"], cwd=tmp_path)
    assert "wrote scale/specs/scale_op.yaml" in out and "with one op, scale_op" in out
    assert (tmp_path / "scale" / "tests" / "test_scale_op.py").exists()
    assert "namespace scale::scale_op" in (tmp_path / "scale" / "kernels" / "scale_op.cc").read_text()
    assert "2 spec file(s) OK" in run([opgen, "check", "specs"], cwd=tmp_path / "scale")


def test_new_refuses_an_op_named_like_its_package(prefix, tmp_path):
    opgen = str(prefix / "bin" / "opgen")
    (tmp_path / "specs").mkdir()
    shutil.copy(REPO / "specs" / "package.yaml", tmp_path / "specs")
    result = subprocess.run([opgen, "new", "opgen_ops"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 1, result.stdout
    assert ("op 'opgen_ops' would have the package's name (specs/package.yaml); an op may not be named like its "
            "package: choose another name") in result.stderr
    assert not (tmp_path / "specs" / "opgen_ops.yaml").exists()
