"""The differential test of torchax's routes (tests/python/routes.py), bounded
for CI: torchax eager, torchax.compile and autograd through torchax, on calls
drawn from every op's description, agree with JAX's and torch's routes (eager
and jitted, jax.grad, the torch wrapper and torch autograd), which
tests/python/test_routes.py holds to every other route."""

from __future__ import annotations

import pytest

import routes
from opgen_ops import _ops

CALLS = 20  # as tests/python/test_routes.py
LIMITS = {"torchax.compile": 6}
ROUTES = [name for name, route in routes.ROUTES.items() if route.process == "torchax"] + list(routes.TORCHAX_REFERENCES)


@pytest.mark.parametrize("op", _ops.OPS, ids=lambda op: op.name)
def test_torchax_gives_the_same_answer_as_every_route(seed, op):
    report = routes.run([op], seed, CALLS, ROUTES, LIMITS)
    if report.disagreements:
        pytest.fail(report.text(), pytrace=False)
