"""Every op of the package through torchax, from its spec alone: on random
valid calls (op_problems.py), for every dtype combination but the 64-bit ones,
the op on torchax tensors (its lowering is the JAX wrapper), eager and under
torchax.compile, equals the torch CPU kernel's result; an output updated in
place is the caller's tensor, updated."""

from __future__ import annotations

import numpy as np
import pytest
import torchax
from torchax import interop

import op_references as ref
import opgen_ops.torch as tops
from conftest import gpu_devices
from test_every_op import CPU_CASES, assert_same, outputs, problems, torch_call
from torch_arrays import to_torch

# Without jax_enable_x64 torchax hands JAX 64-bit tensors as 32-bit ones.
TORCHAX_CASES = [c for c in CPU_CASES if not {"float64", "int64"} & set(c.values[1].values())]


def torchax_call(p, compiled):
    """The op through its documented torch wrapper on torchax copies of the
    inputs: (the inputs, the outputs), as torchax tensors."""
    with torchax.default_env():
        tensors = [None if x is None else to_torch(x).to("jax") for x in p.inputs]
        f = lambda *ts: getattr(tops, p.op.name)(*ts, **p.attrs)  # noqa: E731
        return tensors, outputs((torchax.compile(f) if compiled else f)(*tensors))


@pytest.mark.parametrize("op, dtypes", TORCHAX_CASES)
def test_torchax_matches_the_torch_cpu_kernel(rng, op, dtypes):
    """On JAX's default device (the GPU where there is one): eager, where an
    in-place output is the caller's tensor, and torchax.compile (jax.jit),
    where it comes back as the function's output, as for any op torchax
    compiles."""
    on_gpu = bool(gpu_devices())
    for p in problems(op, dtypes, rng):
        want = torch_call(p, p.inputs)
        for compiled in (False, True):
            tensors, got = torchax_call(p, compiled)
            for g, w, t, dtype in zip(got, want, op.outputs, p.call.output_dtypes):
                where = f"{'torchax.compile' if compiled else 'eager'}, output '{t.name}'"
                if dtype is None:
                    assert g is None, where
                    continue
                if t.alias and not compiled:
                    assert g is tensors[[i.name for i in op.inputs].index(t.alias)], where
                assert isinstance(g, torchax.tensor.Tensor) and g.dtype == w.dtype, where
                assert_same(np.asarray(interop.jax_view(g)), w, dtype, where,
                            ref.CROSS_DEVICE_TOLERANCE if on_gpu else ref.TOLERANCE)
