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

The scratch project (conftest.py's fixture_project, built once for every
fixture op) takes a minute or several to build.
"""

from __future__ import annotations

import pytest

from scratch_project import pytest_in


@pytest.fixture(scope="module")
def project(fixture_project):
    return fixture_project


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
