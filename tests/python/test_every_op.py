"""Tests every op of the package gets from its spec alone, on random valid
calls drawn from its description (op_problems.py), for every dtype
combination of its type variables:

  * PyTorch: the fake (meta) kernel's output shapes and dtypes are those of
    the real CPU kernel's outputs; torch.library.opcheck passes; an input of
    a layout other than dense may be a view (the result is the same, and an
    in-place update lands in the view);
  * JAX: eager, jax.jit and jax.vmap (over a stack of two calls) agree, for
    each api_version XLA:CPU runs;
  * a wrong dtype, rank or size of each input is refused, by JAX and PyTorch,
    with the message that names the op and the input;
  * on a GPU, the CUDA body's results equal the CPU body's on the same inputs
    (JAX and PyTorch), within the tolerance of the dtype.

The same through torchax: tests/torchax/test_every_op_torchax.py.

The op-specific tests hold the CPU bodies to float64 references; these hold
every entry point and the CUDA body to the CPU body.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

import op_problems
import op_references as ref
import opgen_ops.jax as jops
import opgen_ops.torch as tops
from conftest import gpu_devices
from torch_arrays import as_numpy, to_torch, torch_attrs
from opgen_ops import _ops, _spec

CPU = jax.devices("cpu")[0]
CASES = [pytest.param(op, dtypes, id=f"{op.name}[{op_problems.instantiation_id(dtypes)}]")
         for op in _ops.OPS for dtypes in op_problems.instantiations(op)]
CPU_CASES = [c for c in CASES if "cpu" in c.values[0].platforms]
GPU_CASES = [c for c in CASES if {"cpu", "cuda"} <= set(c.values[0].platforms)]


def outputs(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def problems(op, dtypes, rng):
    """A call with every optional input given and, where the op has any, one
    without them; each asking for every output on request and, where the op
    has any, for none; and where the op has a scalar input, one that gives
    each as [1] (as vLLM passes its scales)."""
    return [op_problems.draw(op, dtypes, rng, with_optional=given, asked=asked)
            for given in ([True, False] if op.optional_inputs else [True])
            for asked in ([True, False] if op.requested_outputs else [True])] + \
        ([op_problems.draw(op, dtypes, rng, scalars_as_one=True)] if any(t.scalar for t in op.inputs) else [])


def torch_call(p, inputs, device="cpu"):
    """The op through its documented torch wrapper, on copies of `inputs`."""
    tensors = [to_torch(x, device) for x in inputs]
    return outputs(getattr(tops, p.op.name)(*tensors, **p.attrs))


def jax_call(p, inputs, api_version=4, jit=True, device=CPU):
    f = lambda *xs: getattr(jops, p.op.name)(*xs, **p.attrs, api_version=api_version)  # noqa: E731
    args = [None if x is None else jax.device_put(x, device) for x in inputs]
    return outputs((jax.jit(f) if jit else f)(*args))


def assert_same(got, want, dtype_name, where, tolerance=ref.TOLERANCE, unordered=False):
    """`got` against `want`; an output whose order is unspecified (`unordered`) as a multiset."""
    got, want = as_numpy(got), as_numpy(want)
    if unordered:
        got, want = np.sort(got, axis=None).reshape(got.shape), np.sort(want, axis=None).reshape(want.shape)
    assert got.shape == want.shape, f"{where}: shape {got.shape}, expected {want.shape}"
    if dtype_name in tolerance and want.size:
        # Relative to the outputs' norm, or to that of unit-scale data where the
        # outputs are smaller: two bodies' libm (erf on the GPU and the host)
        # differ by ulps that cancellation can magnify in a tiny output.
        diff = np.linalg.norm(got.astype(np.float64) - np.asarray(want, np.float64))
        assert np.all(np.isfinite(got.astype(np.float64))), f"{where}: non-finite values"
        error = diff / max(np.linalg.norm(np.asarray(want, np.float64)), np.sqrt(want.size))
        assert error < tolerance[dtype_name], f"{where}: relative error {error:.3g}"
    else:  # integers, bool, 8-bit floats: exactly
        np.testing.assert_array_equal(got.astype(np.float64), np.asarray(want, np.float64), err_msg=where)


# --- The drawing ---------------------------------------------------------------------------------


def unique_index(dtype="int64", low=0, exclusive_max=5):
    return _spec.Tensor("slot", dtype, ("N",), values_min=low, values_max=exclusive_max, values_max_exclusive=True,
                        values_range_text=f"in [{low}, {exclusive_max})", values_unique=True)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_a_unique_input_gets_distinct_values_in_its_range(rng, dtype):
    for _ in range(50):
        got = op_problems._values(unique_index(dtype, 0, 20), (8,), dtype, {}, rng)
        assert got.dtype == np.dtype(dtype) and got.shape == (8,)
        assert len(set(got.tolist())) == 8 and got.min() >= 0 and got.max() < 20, got


def test_a_unique_input_longer_than_its_range_gets_the_rest_just_outside_it(rng):
    seen = set()
    for _ in range(50):
        got = op_problems._values(unique_index("int32", 2, 7), (3, 4), "int32", {}, rng)
        assert got.shape == (3, 4)
        inside = got[got != 1]
        assert sorted(inside.tolist()) == [2, 3, 4, 5, 6], got  # every value of the range, once
        assert np.count_nonzero(got == 1) == 7, got  # the rest: min - 1, which every body skips
        seen.add(tuple(got.ravel().tolist()))
    assert len(seen) > 1  # shuffled
    # Where min - 1 does not fit the dtype, max (exclusive) is just outside.
    got = op_problems._values(unique_index("uint8", 0, 3), (6,), "uint8", {}, rng)
    assert sorted(got.tolist()) == [0, 1, 2, 3, 3, 3], got


@pytest.mark.parametrize("op, dtypes", [c for c in CASES if any(t.values_unique for t in c.values[0].inputs)])
def test_every_draw_of_an_op_keeps_its_unique_inputs_distinct(rng, op, dtypes):
    for _ in range(20):
        p = op_problems.draw(op, dtypes, rng)
        bounds = {**p.call.symbols, **{k: v for k, v in p.attrs.items() if type(v) is int}}
        for t, x in zip(op.inputs, p.inputs):
            if not t.values_unique or x is None:
                continue
            x = x.astype(np.int64)
            inside = np.ones(x.shape, bool)
            if t.values_min is not None:
                low = op_problems._evaluate(t.values_min, bounds) + t.values_min_exclusive
                inside &= x >= low
            if t.values_max is not None:
                high = op_problems._evaluate(t.values_max, bounds) - t.values_max_exclusive
                inside &= x <= high
            assert np.unique(x[inside]).size == np.count_nonzero(inside), (t.name, x)
            if t.values_min is not None and t.values_max is not None:  # as many in range as it holds
                assert np.count_nonzero(inside) == min(x.size, high - low + 1), (t.name, x)


# --- PyTorch ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op, dtypes", CPU_CASES)
def test_torch_fake_shapes_are_the_real_ones(rng, op, dtypes):
    for p in problems(op, dtypes, rng):
        real = torch_call(p, p.inputs)
        fake = torch_call(p, p.inputs, device="meta")
        assert len(real) == len(fake) == len(op.outputs)
        for r, f, t, shape, dtype in zip(real, fake, op.outputs, p.call.output_shapes, p.call.output_dtypes):
            if shape is None:  # left out with the optional input it updates
                assert r is None and f is None, t.name
                continue
            assert f.device.type == "meta"
            assert tuple(f.shape) == tuple(r.shape) == tuple(shape), t.name
            assert f.dtype == r.dtype == getattr(torch, dtype), t.name


@pytest.mark.parametrize("op, dtypes", CPU_CASES)
def test_torch_opcheck(rng, op, dtypes):
    if any(op_problems.dtype_of(op, t, dtypes).startswith("float8") for t in op.inputs):
        pytest.skip("torch's opcheck multiplies the tensors it is given (SchemaCheckMode), which torch cannot do in float8")
    overload = getattr(getattr(torch.ops, op.torch_namespace), op.name).default
    for asked, as_one in [(a, False) for a in ([True, False] if op.requested_outputs else [True])] + \
            [(True, True)] * any(t.scalar for t in op.inputs):
        p = op_problems.draw(op, dtypes, rng, asked=asked, scalars_as_one=as_one)
        torch.library.opcheck(overload, tuple(to_torch(x) for x in p.inputs), torch_attrs(op, p.attrs))


@pytest.mark.parametrize("op, dtypes", [c for c in CPU_CASES if any(t.layout != "contiguous" for t in c.values[0].inputs)])
def test_torch_takes_views_where_the_spec_gives_a_layout(rng, op, dtypes):
    p = op_problems.draw(op, dtypes, rng)
    dense = torch_call(p, p.inputs)
    # Each input with a layout becomes a column slice of a wider tensor.
    views, wide = [], []
    for t, x in zip(op.inputs, p.inputs):
        tensor = to_torch(x)
        if x is not None and t.layout != "contiguous" and tensor.dim() > 0:
            w = torch.zeros(*tensor.shape[:-1], tensor.shape[-1] + 3, dtype=tensor.dtype)
            w[..., 1:1 + tensor.shape[-1]] = tensor
            tensor = w[..., 1:1 + tensor.shape[-1]]
            wide.append((t.name, w))
        views.append(tensor)
    got = outputs(getattr(tops, op.name)(*views, **p.attrs))
    for g, d, t, dtype in zip(got, dense, op.outputs, p.call.output_dtypes):
        assert_same(g, d, dtype, f"output '{t.name}' from views")
        if t.alias:  # the update landed in the view, and the padding around it is untouched
            source = dict(wide).get(t.alias)
            if source is not None:
                assert g.data_ptr() == views[[i.name for i in op.inputs].index(t.alias)].data_ptr()
                assert torch.count_nonzero(source[..., 0].float()) == 0
                assert torch.count_nonzero(source[..., -2:].float()) == 0


# --- JAX -------------------------------------------------------------------------------------


@pytest.mark.parametrize("op, dtypes", CPU_CASES)
def test_jax_eager_jit_and_vmap_agree(rng, op, dtypes):
    for p in problems(op, dtypes, rng):
        check_eager_jit_and_vmap(p, rng)


def check_eager_jit_and_vmap(p, rng):
    op = p.op
    for v in op.handlers["cpu"]:
        jitted = jax_call(p, p.inputs, v)
        eager = jax_call(p, p.inputs, v, jit=False)
        for a, b, t, shape in zip(jitted, eager, op.outputs, p.call.output_shapes):
            if shape is None:
                assert a is None and b is None, t.name
                continue
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"api_version {v}, output '{t.name}'")
            assert a.shape == tuple(shape), t.name
    # vmap over two calls of the same sizes (the first api_version).
    q = op_problems.redraw(p, rng)
    stacked = [None if x is None else jax.device_put(np.stack([x, y]), CPU) for x, y in zip(p.inputs, q.inputs)]
    f = lambda *xs: getattr(jops, op.name)(*xs, **p.attrs, api_version=op.handlers["cpu"][0])  # noqa: E731
    in_axes = [None if x is None else 0 for x in stacked]
    mapped = outputs(jax.vmap(f, in_axes=in_axes)(*stacked))
    for k, single in enumerate((p, q)):
        one = jax_call(single, single.inputs, op.handlers["cpu"][0])
        for m, o, t in zip(mapped, one, op.outputs):
            if o is None:
                assert m is None, t.name
                continue
            np.testing.assert_array_equal(np.asarray(m)[k], np.asarray(o), err_msg=f"vmap item {k}, output '{t.name}'")


# --- Refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize("op, dtypes", [c for c in CPU_CASES if c.values[1] == op_problems.instantiations(c.values[0])[0]])
def test_a_wrong_dtype_rank_or_size_is_refused(rng, op, dtypes):
    p = op_problems.draw(op, dtypes, rng)
    for i, t in enumerate(op.inputs):
        if p.inputs[i] is None:
            continue
        bad = []
        d = op_problems.wrong_dtype(op, t)
        bad.append((p.inputs[i].astype(op_problems.numpy_dtype(d)), rf"{op.name}: input '{t.name}' has dtype"))
        if t.scalar:  # [] and [1] are its shapes; no other is
            for shape in [(2,), (1, 1)]:
                bad.append((np.resize(p.inputs[i], shape), rf"{op.name}: input '{t.name}' has shape "
                            rf"\[{', '.join(map(str, shape))}\]; the spec declares a scalar: \[\] or \[1\]"))
        elif not t.batch:
            bad.append((p.inputs[i][None], rf"{op.name}: input '{t.name}' has rank"))
        for axis, dim in enumerate(t.shape):
            if isinstance(dim, int) or any(dim in u.shape for u in op.inputs[:i]) or \
                    any(dim in u.shape[:axis] for u in op.inputs[i:i + 1]):
                # A fixed size, or a symbol bound before: one more is wrong.
                shape = list(p.inputs[i].shape)
                shape[len(shape) - len(t.shape) + axis] += 1
                bad.append((np.resize(p.inputs[i], shape), rf"{op.name}: input '{t.name}' has shape"))
                break
        for x, message in bad:
            inputs = list(p.inputs)
            inputs[i] = x
            with pytest.raises((TypeError, ValueError), match=message):
                jax_call(p, inputs)
            with pytest.raises((RuntimeError, TypeError, ValueError), match=message):
                torch_call(p, inputs)


# --- The CUDA body against the CPU body -----------------------------------------------------------


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("op, dtypes", GPU_CASES)
def test_jax_cuda_body_matches_the_cpu_body(rng, op, dtypes):
    for p in problems(op, dtypes, rng):
        check_jax_cuda_body(p)


def check_jax_cuda_body(p):
    op = p.op
    for v in op.api_versions:
        on_gpu = jax_call(p, p.inputs, v, device=gpu_devices()[0])
        if v not in (4, 3):
            on_cpu = jax_call(p, p.inputs, op.handlers["cpu"][0])
        else:
            on_cpu = jax_call(p, p.inputs, v)
        for g, c, t, dtype in zip(on_gpu, on_cpu, op.outputs, p.call.output_dtypes):
            if dtype is not None:
                assert_same(g, c, dtype, f"api_version {v}, output '{t.name}'", ref.CROSS_DEVICE_TOLERANCE,
                            t.unordered)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("op, dtypes", GPU_CASES)
def test_torch_cuda_body_matches_the_cpu_body(rng, op, dtypes):
    for p in problems(op, dtypes, rng):
        on_gpu = torch_call(p, p.inputs, device="cuda")
        on_cpu = torch_call(p, p.inputs)
        for g, c, t, dtype in zip(on_gpu, on_cpu, op.outputs, p.call.output_dtypes):
            if dtype is None:
                continue
            assert g.device.type == "cuda", t.name
            assert_same(g, c, dtype, f"output '{t.name}'", ref.CROSS_DEVICE_TOLERANCE, t.unordered)


def test_an_unordered_output_is_compared_as_a_multiset(rng):
    # The CUDA comparisons above pass an output's `unordered`; the CPU bodies give one order.
    x = rng.integers(0, 1000, 64).astype(np.int32)
    assert_same(rng.permutation(x), x, "int32", "a permutation", unordered=True)
    with pytest.raises(AssertionError):
        assert_same(rng.permutation(x), x, "int32", "a permutation, ordered")
    y = x.copy()
    y[rng.integers(64)] += 1
    with pytest.raises(AssertionError):
        assert_same(rng.permutation(y), x, "int32", "another multiset", unordered=True)
