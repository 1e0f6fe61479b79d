"""Scalar inputs (an input the spec declares `[]`) given as [] or [1] where a
shipped op has none of the kinds: one differentiated and one updated in
place, on the fixture op tests/fixtures/scalar_scale (spec, CPU body, its
backward op scale_grads, and its checks, check_scalar_scale.py) dropped into
a scratch copy of this project, whose package is built; then the tests every
op gets from its spec (test_every_op.py gives each scalar input as [1] in one
of its calls) and the fixture's own checks: the updated total has the shape
it was given, the gradient of a [1] scale is [1] (jax.grad, autograd,
torch.compile), and another shape is refused.

The scratch project (conftest.py's fixture_project, built once for every
fixture op) takes a minute or several to build.
"""

from __future__ import annotations

from scratch_project import pytest_in


def test_the_fixture_checks_pass(fixture_project):
    out = pytest_in(fixture_project, "test_scalar_scale.py", "-rs")
    assert "skipped" not in out, out[-3000:]


def test_every_op_tests_pass_for_the_fixture(fixture_project):
    out = pytest_in(fixture_project, "test_every_op.py", "-k", "scalar_scale or scale_grads")
    assert "scalar_scale" not in out.split("short test summary")[-1], out[-3000:]
