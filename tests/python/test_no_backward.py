"""An op whose spec declares no backward is an error under differentiation
that names the op, in both frameworks, never torch's warning with a gradient
of None or a silent zero: jax.grad raises at trace time; the torch wrapper
raises at backward(), or at the call for an op that updates an input in place,
and runs as before under torch.no_grad(). Every op of the package, from its
description."""

import jax
import numpy as np
import pytest
import torch

import op_problems
import opgen_ops.jax as jops
import opgen_ops.torch as tops
from opgen_ops import _ops

CPU = jax.devices("cpu")[0]
FLOAT = ("float16", "bfloat16", "float32", "float64")


def float_case(op):
    """The first instantiation of `op` with a floating input, or None."""
    for dtypes in op_problems.instantiations(op):
        p = op_problems.draw(op, dtypes, np.random.default_rng(0))
        floats = [i for i, x in enumerate(p.inputs) if x is not None and x.dtype.name in FLOAT]
        if floats:
            return p, floats[0]
    return None


CASES = [pytest.param(op, id=op.name) for op in _ops.OPS if op.backward is None and "cpu" in op.platforms and float_case(op)]


@pytest.mark.parametrize("op", CASES)
def test_jax_grad_names_the_op(op):
    p, i = float_case(op)

    def loss(x):
        inputs = list(p.inputs)
        inputs[i] = x
        out = getattr(jops, op.name)(*inputs, **p.attrs)
        outs = out if isinstance(out, tuple) else (out,)
        return sum(o.astype("float32").sum() for o in outs if o is not None and o.dtype.name in FLOAT)

    with pytest.raises(TypeError, match=f"{op.name} has no backward"):
        jax.grad(loss)(jax.device_put(p.inputs[i], CPU))


@pytest.mark.parametrize("op", CASES)
def test_torch_backward_names_the_op(op):
    p, i = float_case(op)
    tensors = [None if x is None else torch.from_numpy(np.asarray(x, np.float64 if x.dtype.name == "float64" else
                                                                    np.float32 if x.dtype.name in FLOAT else x.dtype))
               for x in p.inputs]
    dtype = p.inputs[i].dtype.name
    tensors[i] = tensors[i].to(getattr(torch, dtype)).requires_grad_()
    for k, x in enumerate(p.inputs):
        if k != i and x is not None and x.dtype.name in FLOAT:
            tensors[k] = tensors[k].to(getattr(torch, x.dtype.name))
    with pytest.raises(RuntimeError, match=f"{op.name} has no backward"):
        out = getattr(tops, op.name)(*tensors, **p.attrs)
        outs = out if isinstance(out, tuple) else (out,)
        sum(o.float().sum() for o in outs if o is not None and o.is_floating_point()).backward()
    with torch.no_grad():  # without autograd the op runs
        args = [None if t is None else t.detach().clone() for t in tensors]
        getattr(tops, op.name)(*args, **p.attrs)
