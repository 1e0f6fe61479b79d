"""An op whose spec declares no backward is an error under differentiation
that names the op, in both frameworks, never torch's warning with a gradient
of None or a silent zero: jax.grad raises at trace time; the torch wrapper
raises at backward(), or at the call for an op that updates an input in place,
and runs as before under torch.no_grad(). An op whose spec says
`differentiable: false` runs instead, its outputs constants: jax.grad gives its
inputs no gradient through it, and torch returns outputs that require no grad
(the wrapper and torch.ops alike). Every op of the package, from its
description."""

import dataclasses

import jax
import numpy as np
import pytest
import torch

import op_problems
import opgen_ops.jax as jops
import opgen_ops.torch as tops
from opgen_ops import _ops
from torch_arrays import to_torch, torch_attrs

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


CASES = [pytest.param(op, id=op.name) for op in _ops.OPS
         if op.backward is None and op.differentiable and "cpu" in op.platforms and float_case(op)]
CONSTANT_CASES = [pytest.param(op, id=op.name) for op in _ops.OPS
                  if not op.differentiable and "cpu" in op.platforms and float_case(op)]


def floating_sum(out, framework):
    """The sum of an op's floating outputs (a loss through all of them)."""
    outs = out if isinstance(out, tuple) else (out,)
    if framework == "jax":
        return sum(o.astype("float32").sum() for o in outs if o is not None and o.dtype.name in FLOAT)
    return sum(o.float().sum() for o in outs if o is not None and o.is_floating_point())


@pytest.mark.parametrize("op", CASES)
def test_jax_grad_names_the_op(op):
    p, i = float_case(op)

    def loss(x):
        inputs = list(p.inputs)
        inputs[i] = x
        return floating_sum(getattr(jops, op.name)(*inputs, **p.attrs), "jax")

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


@pytest.mark.parametrize("op", [c for c in CASES if not c.values[0].aliased_outputs])
def test_torch_compile_runs_the_forward_and_refuses_the_backward(op):
    """As eager does: torch.compile traces the backward when it compiles the
    forward, and refused the call itself (issue 37's differential test)."""
    p, i = float_case(op)
    tensors = torch_inputs(p, i)
    torch._dynamo.reset()
    f = torch.compile(lambda *ts: getattr(tops, op.name)(*ts, **p.attrs), fullgraph=True)
    out = f(*tensors)
    expected = getattr(tops, op.name)(*[None if t is None else t.detach() for t in tensors], **p.attrs)
    outs, expected = (out, expected) if isinstance(out, tuple) else ((out,), (expected,))
    for o, e in zip(outs, expected):
        if o is not None:
            torch.testing.assert_close(o.detach(), e)
    with pytest.raises(RuntimeError, match=f"{op.name} has no backward"):
        floating_sum(out, "torch").backward()


def torch_inputs(p, i):
    """The problem's inputs as torch tensors, input `i` requiring grad."""
    tensors = [None if x is None else to_torch(x) for x in p.inputs]
    tensors[i] = tensors[i].requires_grad_()
    return tensors


@pytest.mark.parametrize("op", CONSTANT_CASES)
def test_jax_grad_sees_constants(op):
    p, i = float_case(op)
    x = jax.device_put(p.inputs[i], CPU)

    def loss(x):
        inputs = list(p.inputs)
        inputs[i] = x
        # The op's outputs, and x itself: only x's own term has a gradient.
        return floating_sum(getattr(jops, op.name)(*inputs, **p.attrs), "jax") + (x.astype("float32") * 2).sum()

    for grad in (jax.grad(loss), jax.jit(jax.grad(loss))):
        np.testing.assert_array_equal(np.asarray(grad(x), np.float32), np.full(x.shape, 2.0, np.float32))


@pytest.mark.parametrize("op", CONSTANT_CASES)
def test_torch_outputs_are_constants(op):
    """The wrapper, and torch.ops where the op updates no input in place
    (register_autograd takes functional schemas only: docs/spec.md)."""
    p, i = float_case(op)
    routes = [getattr(tops, op.name)] + ([] if op.aliased_outputs else [getattr(torch.ops.opgen_ops, op.name)])
    for f in routes:
        tensors = torch_inputs(p, i)
        out = f(*tensors, **torch_attrs(op, p.attrs))
        outs = out if isinstance(out, tuple) else (out,)
        assert all(not o.requires_grad and o.grad_fn is None for o in outs if o is not None)
        (tensors[i].float() * 2).sum().backward()  # x's own gradient, untouched by the op
        torch.testing.assert_close(tensors[i].grad.float(), torch.full(tensors[i].shape, 2.0))


def test_an_in_place_op_declared_not_differentiable_runs_without_a_graph(rng):
    """An op that updates an input in place has no schema output to mark
    non-differentiable: the wrapper runs it under no_grad. (kv_cache_write,
    described here as not differentiable; as it is, it raises.)"""
    from opgen_ops import _torch_runtime

    op = dataclasses.replace(_ops.kv_cache_write.OP, differentiable=False)
    cache = torch.from_numpy(rng.standard_normal((2, 4, 8)).astype(np.float32))
    values = torch.from_numpy(rng.standard_normal((2, 8)).astype(np.float32)).requires_grad_()
    pos = torch.tensor([3, 1], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="kv_cache_write has no backward"):
        tops.kv_cache_write(cache, values, pos)
    out = _torch_runtime.call(op, (cache, values, pos), {}, {})
    assert out is cache and not cache.requires_grad and cache.grad_fn is None
    torch.testing.assert_close(cache[[0, 1], [3, 1]], values.detach(), rtol=0, atol=0)
