"""torchax: PyTorch programs through JAX call the generated ops as JAX does.
What test_every_op.py checks for every op (results against the torch CPU
kernels, eager and compiled) is not repeated here; this file checks what
torchax adds: the lowered HLO holds the typed-FFI custom call, jax.jit of a
torchax-converted function runs it, views passed to an in-place op are
updated, mixed tensors and bad calls are refused with the op's message, and
the lowerings are registered whichever of torchax and the package is
imported first (and torchax is never imported by the package)."""

import os
import subprocess
import sys

import jax
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchax
from torchax import interop

import op_references as ref
import opgen_ops.torch as tops
from opgen_ops import _ops
from torch_arrays import as_numpy


def test_jax_jit_of_a_torchax_function_holds_the_typed_ffi_call(rng):
    x = rng.standard_normal((3, 16)).astype(np.float32)
    w = rng.standard_normal(16).astype(np.float32)

    def layer(x, w):
        return tops.glu(tops.rms_norm(x, w)[0], activation="silu")

    f = jax.jit(interop.jax_view(layer))
    hlo = f.lower(x, w).compile().as_text()  # the HLO XLA compiled
    for op in (_ops.rms_norm.OP, _ops.glu.OP):
        assert f'custom_call_target="{op.ffi_target}"' in hlo, op.name
    want = layer(torch.from_numpy(x), torch.from_numpy(w))
    np.testing.assert_allclose(np.asarray(f(x, w)), want.numpy(), rtol=1e-6, atol=1e-6)


def test_an_in_place_op_updates_the_views_it_is_given(rng):
    """Rotary on the query and key columns of one qkv tensor, as vLLM calls it."""
    n, heads, kv_heads, head = 5, 4, 2, 8
    qkv = rng.standard_normal((n, (heads + 2 * kv_heads) * head)).astype(np.float32)
    cache = rng.standard_normal((16, head)).astype(np.float32)
    positions = rng.integers(0, 16, n).astype(np.int32)
    q_end, k_end = heads * head, (heads + kv_heads) * head

    want = torch.from_numpy(qkv.copy())
    tops.rotary_embedding(torch.from_numpy(positions), want[:, :q_end], torch.from_numpy(cache), want[:, q_end:k_end],
                          head_size=head)
    with torchax.default_env():
        got = torch.from_numpy(qkv).to("jax")
        tops.rotary_embedding(torch.from_numpy(positions).to("jax"), got[:, :q_end], torch.from_numpy(cache).to("jax"),
                              got[:, q_end:k_end], head_size=head)
    np.testing.assert_allclose(np.asarray(interop.jax_view(got)), want.numpy(), rtol=1e-6, atol=1e-6)
    assert not np.array_equal(want.numpy(), qkv)  # the op did rotate something


def test_a_cpu_tensor_beside_torchax_tensors_is_refused(rng):
    with torchax.default_env():
        x = torch.from_numpy(rng.standard_normal((2, 8)).astype(np.float32))
        with pytest.raises(TypeError, match=r"rms_norm: input 'weight' is a torch.Tensor on cpu, beside torchax"):
            tops.rms_norm(x.to("jax"), torch.ones(8, device="cpu"))


def test_a_bad_call_gets_the_op_s_message(rng):
    with torchax.default_env():
        x = torch.from_numpy(rng.standard_normal((2, 7)).astype(np.float32)).to("jax")
        with pytest.raises(ValueError, match=r"glu: output 'out' is declared \[..., D/2\], but 7 is not divisible by 2"):
            tops.glu(x)
        with pytest.raises(TypeError, match=r"rms_norm: input 'x' has dtype int32"):
            tops.rms_norm(x.to(torch.int32))


IMPORT_ORDERS = {
    "package first": """
import sys
import opgen_ops.torch as tops
assert "torchax" not in sys.modules, "the package imported torchax"
import torchax
env = torchax.default_env()
""",
    "torchax first, its environment made": """
import torchax
env = torchax.default_env()
import opgen_ops.torch as tops
""",
}


@pytest.mark.parametrize("order", IMPORT_ORDERS)
def test_the_lowerings_are_registered_in_either_import_order(order):
    script = IMPORT_ORDERS[order] + """
import torch
with env:
    a = torch.arange(4, dtype=torch.float32).to("jax")
    out = torch.ops.opgen_ops.simple_add(a, a, alpha=0.5)
    assert type(out).__name__ == "Tensor" and out.device.type == "jax", (type(out), out.device)
    print(out.cpu().tolist())
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ),
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-2] == "[0.0, 1.5, 3.0, 4.5]"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
def test_torch_cuda_kernels_run_beside_torchax(rng):
    """torchax registers itself as torch's PrivateUse1 backend, which torch's
    current-accelerator queries then answer with; the CUDA kernels find their
    device through the CUDA runtime, so they still run."""
    a, b = (torch.from_numpy(rng.standard_normal(1000).astype(np.float32)) for _ in range(2))
    out = tops.simple_add(a.cuda(), b.cuda(), alpha=0.5)
    np.testing.assert_allclose(out.cpu().numpy(), a.numpy() + 0.5 * b.numpy(), rtol=1e-6, atol=1e-6)


def test_an_input_passed_twice_to_an_in_place_op_is_refused(rng):
    with torchax.default_env():
        x = torch.from_numpy(rng.standard_normal((2, 8)).astype(np.float32)).to("jax")
        w = torch.ones(8).to("jax")
        with pytest.raises(ValueError, match=r"fused_add_rms_norm: input 'residual' shares memory with input 'x', which the op updates in place"):
            tops.fused_add_rms_norm(x, x, w)


@pytest.mark.parametrize("grad", [False, True], ids=["no grad", "weight requires grad"])
def test_an_input_passed_twice_is_refused_on_every_path(rng, grad):
    with torchax.default_env():
        b = torch.from_numpy(rng.standard_normal((2, 8)).astype(np.float32)).to("jax")
        w = torch.ones(8).to("jax").requires_grad_(grad)
        before = np.asarray(interop.jax_view(b)).copy()
        with pytest.raises(ValueError, match=r"input 'residual' shares memory with input 'x'"):
            tops.fused_add_rms_norm(b, b, w)
        assert np.array_equal(np.asarray(interop.jax_view(b)), before), "a refused call changed b"


@pytest.mark.parametrize("grad", [False, True], ids=["no grad", "cache requires grad"])
def test_a_key_inside_the_query_is_refused(rng, grad):
    with torchax.default_env():
        query = torch.from_numpy(rng.standard_normal((4, 32)).astype(np.float32)).to("jax")
        cache = torch.from_numpy(rng.standard_normal((8, 8)).astype(np.float32)).to("jax").requires_grad_(grad)
        positions = torch.arange(4).to("jax")
        with pytest.raises(ValueError, match=r"input '(key|query)' shares memory with input '(query|key)'"):
            tops.rotary_embedding(positions, query, cache, query[:, 8:24], head_size=8)


def test_a_probe_for_torchax_before_its_import_keeps_the_registration():
    """importlib.util.find_spec finds a module without executing it; the
    lowerings are registered when the import executes it."""
    script = IMPORT_ORDERS["package first"].replace(
        "import torchax\n", "import importlib.util\nassert importlib.util.find_spec('torchax')\nimport torchax\n")
    result = subprocess.run([sys.executable, "-c", script + """
import torch
with env:
    a = torch.arange(4, dtype=torch.float32).to("jax")
    print(torch.ops.opgen_ops.simple_add(a, a, alpha=0.5).cpu().tolist())
"""], capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-2] == "[0.0, 1.5, 3.0, 4.5]"


def test_an_op_declared_not_differentiable_gives_constants_under_autograd(rng):
    """topk_softmax (differentiable: false) on a torchax tensor that requires
    grad: it runs, its outputs need no gradient, and a loss through it and
    through the input gets the input's own gradient alone."""
    x = rng.standard_normal((6, 16)).astype(np.float32)
    want_w, want_i = tops.topk_softmax(torch.from_numpy(x), topk=3, renormalize=True)
    with torchax.default_env():
        t = torch.from_numpy(x).to("jax").requires_grad_()
        weights, indices = tops.topk_softmax(t, topk=3, renormalize=True)
        assert not weights.requires_grad and not indices.requires_grad
        np.testing.assert_allclose(np.asarray(interop.jax_view(weights)), want_w.numpy(), rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(interop.jax_view(indices)), want_i.numpy())
        (weights.sum() + (t * 2).sum()).backward()
        np.testing.assert_array_equal(np.asarray(interop.jax_view(t.grad)), np.full(x.shape, 2.0, np.float32))


def test_none_for_a_dtype_attribute_is_refused(rng):
    """None is no dtype (numpy reads np.dtype(None) as float64), through the
    wrapper and torch.ops alike: torchax hands the call to the lowering before
    torch's schema parser sees it."""
    message = ("dynamic_per_token_scaled_fp8_quant: attribute 'out_dtype' must be a dtype, one of float8_e4m3fn, "
               "float8_e5m2; not NoneType")
    with torchax.default_env():
        x = torch.from_numpy(rng.standard_normal((2, 8)).astype(np.float32)).to("jax")
        for f in (tops.dynamic_per_token_scaled_fp8_quant, torch.ops.opgen_ops.dynamic_per_token_scaled_fp8_quant):
            with pytest.raises(TypeError, match=message):
                f(x, out_dtype=None)


# --- Autograd: torchax runs an op's lowering from its torch function mode, above the Autograd key ---------------


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


D = 16
# op: (its float inputs from rng, its output through a namespace of ops (the wrapper, or torch.ops), the
# output through torch's own functions, the reference)
GRADIENT_CASES = {
    "rms_norm": (lambda r: [f32(r, 3, 2, D), 1 + 0.1 * f32(r, D), f32(r, D)],
                 lambda ops, x, w, b: ops.rms_norm(x, w, b, eps=1e-5)[0],
                 lambda x, w, b: F.rms_norm(x, (D,), w, 1e-5) + b),
    "layer_norm": (lambda r: [f32(r, 3, D), 1 + 0.1 * f32(r, D), f32(r, D)],
                   lambda ops, x, w, b: ops.layer_norm(x, w, b, eps=1e-5)[0],
                   lambda x, w, b: F.layer_norm(x, (D,), w, b, 1e-5)),
    "softmax": (lambda r: [f32(r, 3, D)], lambda ops, x: ops.softmax(x), lambda x: torch.softmax(x, -1)),
    "glu": (lambda r: [f32(r, 3, 2 * D)], lambda ops, x: ops.glu(x, activation="sigmoid"), lambda x: F.glu(x, -1)),
}
ROUTES = {"opgen_ops.torch": tops, "torch.ops": torch.ops.opgen_ops}


def loss_gradients(f, arrays, cotangent, to):
    """The gradient of each input of (f(inputs) * cotangent).sum() + (2 * first input).sum(), the
    issue's loss: the op's gradient plus 2, where a route that records nothing gives 2 alone."""
    ts = [to(a).requires_grad_() for a in arrays]
    out = f(*ts)
    assert out.requires_grad and out.grad_fn is not None
    ((out * to(cotangent)).sum() + (ts[0] * 2).sum()).backward()
    return [t.grad for t in ts]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("op", GRADIENT_CASES)
def test_an_op_with_a_backward_records_its_gradient(rng, op, route):
    """The gradients on torchax tensors against torch's own functions' in
    float64 (and the CPU route's); they were 2 and 0, the op unrecorded."""
    make, ours, native = GRADIENT_CASES[op]
    arrays = make(rng)
    cotangent = f32(rng, *native(*[torch.from_numpy(a) for a in arrays]).shape)
    want = loss_gradients(native, [a.astype(np.float64) for a in arrays], cotangent.astype(np.float64),
                          torch.from_numpy)
    cpu = loss_gradients(lambda *ts: ours(ROUTES[route], *ts), arrays, cotangent, torch.from_numpy)
    with torchax.default_env():
        got = loss_gradients(lambda *ts: ours(ROUTES[route], *ts), arrays, cotangent,
                             lambda a: torch.from_numpy(a).to("jax"))
        got = [np.asarray(interop.jax_view(g)) for g in got]
    for g, c, w in zip(got, cpu, want):
        assert ref.relative_error(g, w.numpy()) < ref.TOLERANCE["float32"]
        assert ref.relative_error(g, c.numpy().astype(np.float64)) < ref.TOLERANCE["float32"]


@pytest.mark.parametrize("route", ROUTES)
def test_an_op_that_updates_in_place_records_its_gradient(rng, route):
    """fused_add_rms_norm updates x and residual in place: its out-of-place
    Function's backward ran the backward op through torch.ops, which torchax
    no longer intercepts there (an AssertionError from torchax); torch.ops
    recorded nothing."""
    x, residual, weight, c = f32(rng, 3, D), f32(rng, 3, D), 1 + 0.1 * f32(rng, D), f32(rng, 3, D)

    def loss(to, call=None):
        x0, r0, w = (to(a).requires_grad_() for a in (x, residual, weight))
        xs, rs = x0 * 1, r0 * 1  # autograd refuses an in-place update of a leaf
        if call is None:  # torch's own functions: residual = x + residual, x = rms_norm(residual)
            rs = xs + rs
            xs = F.rms_norm(rs, (D,), w, 1e-6)
        else:
            call(xs, rs, w)
        ((xs * to(c)).sum() + (rs * rs).sum()).backward()
        return [t.grad for t in (x0, r0, w)]

    call = lambda x, r, w: getattr(ROUTES[route], "fused_add_rms_norm")(x, r, w, eps=1e-6)  # noqa: E731
    want = loss(lambda a: torch.from_numpy(a.astype(np.float64)))
    with torchax.default_env():
        got = [np.asarray(interop.jax_view(g)) for g in loss(lambda a: torch.from_numpy(a).to("jax"), call)]
    for g, w in zip(got, want):
        assert ref.relative_error(g, w.numpy()) < ref.TOLERANCE["float32"]


@pytest.mark.parametrize("route", ROUTES)
def test_an_op_without_a_backward_names_itself(rng, route):
    """gemm (no backward): its outputs need a gradient and their backward
    raises the op's error, as on the CPU route; an op that updates in place
    without one (kv_cache_write) raises at the call. They ran, recording
    nothing (a gradient of None)."""
    a, b = f32(rng, 3, 4), f32(rng, 4, 5)
    ops = ROUTES[route]
    with torchax.default_env():
        ta = torch.from_numpy(a).to("jax").requires_grad_()
        out = ops.gemm(ta, torch.from_numpy(b).to("jax"))
        np.testing.assert_allclose(np.asarray(interop.jax_view(out)), a @ b, rtol=1e-5, atol=1e-5)
        assert out.requires_grad
        with pytest.raises(RuntimeError, match=r"gemm has no backward \(its spec declares none\)"):
            out.sum().backward()
        cache = torch.from_numpy(f32(rng, 2, 4, 3)).to("jax").requires_grad_() * 1
        values, pos = torch.from_numpy(f32(rng, 2, 3)).to("jax"), torch.tensor([1, 3], dtype=torch.int32).to("jax")
        with pytest.raises(RuntimeError, match=r"kv_cache_write has no backward \(its spec declares none\)"):
            ops.kv_cache_write(cache, values, pos)


@pytest.mark.parametrize("grad", [False, True], ids=["no grad", "requires grad"])
def test_an_attribute_of_another_python_type_gets_jax_s_refusal(rng, grad):
    """torchax hands torch.ops' arguments to the lowering before torch's schema
    parser converts them, so both routes refuse as JAX does, with a gradient
    needed too (where the lowering checks them before recording)."""
    with torchax.default_env():
        x = torch.from_numpy(f32(rng, 4, 8)).to("jax").requires_grad_(grad)
        for f in (tops.topk_softmax, torch.ops.opgen_ops.topk_softmax):
            for value, kind in [(torch.tensor(2.7), "Tensor"), (True, "bool"), (np.array(2), "ndarray")]:
                with pytest.raises(TypeError, match=f"topk_softmax: attribute 'topk' must be an int, not {kind}"):
                    f(x, topk=value)
        with pytest.raises(TypeError, match="rms_norm: attribute 'eps' must be a float, not Tensor"):
            tops.rms_norm(x, eps=torch.tensor(1e-3))
