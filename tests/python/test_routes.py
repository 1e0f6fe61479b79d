"""The differential test of every route (routes.py), bounded for CI: for
every op of the package, calls drawn from its description -- valid ones and
ones at and past every edge, a different sample of the edges for each seed
(OPGEN_TEST_SEED replays one) -- through every route but torchax's
(tests/torchax/test_routes_torchax.py: a process of its own), and every pair
of answers agrees but where routes.INTENDED says why not. A failure lists
each call with its one-line replay: `python routes.py --seed S --ops OP
--index I`; `python routes.py --calls 200` is the long run.

The fixture ops of tests/fixtures (an op with state, one with outputs on
request and a CUDA-only workspace) get the same test in the scratch project
that builds them."""

from __future__ import annotations

import numpy as np
import pytest

import opgen_ops.jax as jops
import routes
from opgen_ops import _ops
from scratch_project import pytest_in

# About three minutes on two cores in all: a third of an op's edges or so (routes.edges: 40 to 70)
# a seed; the routes that compile each call afresh (torch.compile, about a second; jax.vmap's
# loop of sequential calls, a quarter) on the first few.
CALLS = 20
LIMITS = {"torch.compile": 3, "jax.vmap": 8}
ROUTES = [name for name, route in routes.ROUTES.items() if route.process == "main"]


@pytest.mark.parametrize("op", _ops.OPS, ids=lambda op: op.name)
def test_every_route_gives_the_same_answer(seed, op):
    report = routes.run([op], seed, CALLS, ROUTES, LIMITS)
    if report.disagreements:
        pytest.fail(report.text(), pytrace=False)


def test_every_route_gives_the_same_answer_for_the_fixture_ops(fixture_project):
    fixtures = [p.name for p in (fixture_project / "tests" / "fixtures").iterdir() if p.is_dir()]
    out = pytest_in(fixture_project, "test_routes.py", "-k", " or ".join(fixtures))
    assert f"{len(fixtures)} passed" in out, out[-3000:]


def test_an_unordered_output_is_compared_as_a_multiset(rng):
    op = next(op for op in _ops.OPS if op.name == "moe_align_block_size")
    ids = rng.integers(0, 8, (40, 2)).astype(np.int32)
    c = routes.Case(op, 0, 0, "valid", {"I": "int32"}, [ids], {"num_experts": 8, "block_size": 4})
    got = routes.Outcome(tuple(routes.value(v) for v in jops.moe_align_block_size(ids, num_experts=8, block_size=4)))
    values = list(got.values)
    values[0] = routes.value(rng.permutation(np.asarray(values[0].data)).astype(np.int32))
    assert routes.compare(c, "jax.jit[v4]", got, "jax.eager[v4]", routes.Outcome(tuple(values))) is None
    values[1] = routes.value(rng.permutation(np.asarray(values[1].data)).astype(np.int32))  # expert_ids: ordered
    assert routes.compare(c, "jax.jit[v4]", got, "jax.eager[v4]", routes.Outcome(tuple(values))) is not None
