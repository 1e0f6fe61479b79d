"""Outputs on request (`optional: true` on an output) and a workspace that CUDA
alone allocates (`platforms: [cuda]` on a workspace), on a fixture op that the
shipped package does not have: tests/fixtures/row_stats (spec, CPU and CUDA
bodies, and its checks, check_row_stats.py) dropped into a scratch copy of
this project, whose package is built (CUDA where nvcc is found) and then runs
the tests every op gets from its spec (test_every_op.py asks for every output
on request and for none) and the fixture's own checks: values against a
float64 reference for each combination asked, `None` for those not asked,
the CPU custom call without the workspace or the outputs not asked for, a CPU
call whose workspace would be 2^62 bytes, torch.compile, opcheck, the
partitioner, and on a GPU the CUDA body with its workspace.

It builds the whole package, a minute or several; it skips where opgen is
not built (OPGEN_BINARY, as test_new_op.py).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from scratch_project import REPO, configure_and_build, copy_project, run

OPGEN = Path(os.environ.get("OPGEN_BINARY", REPO / "build" / "generator" / "opgen"))
FIXTURE = REPO / "tests" / "fixtures" / "row_stats"

if not OPGEN.is_file():
    pytest.skip(f"no opgen binary at {OPGEN} (build it, or set OPGEN_BINARY)", allow_module_level=True)
if not shutil.which("cmake") or not shutil.which("ninja"):
    pytest.skip("CMake and Ninja are needed to build the scratch project", allow_module_level=True)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("scratch") / "project"
    root.mkdir()
    copy_project(root)
    shutil.copy(FIXTURE / "row_stats.yaml", root / "specs")
    shutil.copy(FIXTURE / "row_stats.cc", root / "kernels")
    shutil.copy(FIXTURE / "row_stats.cu", root / "kernels")
    shutil.copy(FIXTURE / "check_row_stats.py", root / "tests" / "python" / "test_row_stats.py")
    configure_and_build(root)
    return root


def pytest_in(root: Path, *args) -> str:
    # Two CPU devices for the partitioner; the GPU, where there is one, as the tests find it.
    env = dict(os.environ, PYTHONPATH=str(root / "build" / "python"),
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip())
    r = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], root / "tests" / "python", env,
            timeout=3600)
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-4000:]
    assert " passed" in r.stdout, r.stdout[-3000:]
    return r.stdout


def test_the_fixture_checks_pass(project):
    out = pytest_in(project, "test_row_stats.py", "-rs")
    # Only GPU tests and what needs x64 may skip.
    for line in out.splitlines():
        if line.startswith("SKIPPED"):
            assert "GPU" in line or "CUDA" in line or "float64" in line or "lower for CUDA" in line, line


def test_every_op_tests_pass_for_the_fixture(project):
    out = pytest_in(project, "test_every_op.py", "-k", "row_stats")
    assert "row_stats" not in out.split("short test summary")[-1], out[-3000:]


def test_the_fixture_header_tells_the_body_what_is_nullptr(project):
    header = (project / "generated" / "include" / "opgen_ops" / "row_stats.h").read_text()
    assert "float* mean;  // [...]; optional: nullptr when the caller does not ask for it (return_mean)" in header
    assert "float* partial;  // [scratch_size]; on cuda only: nullptr on cpu" in header
