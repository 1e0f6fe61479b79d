"""An op's state (`state:`), made once per device by the runtime and handed
to every call there, on a fixture op that the shipped package does not have:
tests/fixtures/counted_state (spec, CPU and CUDA bodies, and its checks,
check_counted_state.py) in the scratch project of conftest.py's
fixture_project, where its checks run: one state per module and device,
whatever the shapes, executables, api_versions (XLA's typed FFI and legacy
calls), torch eager and torch.compile; one state for concurrent first calls;
on a GPU, one per device, and a first call inside a torch CUDA graph capture
and inside XLA's command buffers.
"""

from __future__ import annotations

from scratch_project import pytest_in


def test_the_fixture_checks_pass(fixture_project):
    out = pytest_in(fixture_project, "test_counted_state.py", "-rs")
    # Only GPU tests may skip.
    for line in out.splitlines():
        if line.startswith("SKIPPED"):
            assert "GPU" in line or "CUDA" in line, line


def test_every_op_tests_pass_for_the_fixture(fixture_project):
    out = pytest_in(fixture_project, "test_every_op.py", "-k", "counted_state")
    assert "counted_state" not in out.split("short test summary")[-1], out[-3000:]
