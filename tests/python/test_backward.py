"""Ops whose spec declares a backward (rms_norm through rms_norm_backward,
layer_norm through layer_norm_backward (the norms' tests are one, parametrised), glu
through glu_backward, rotary_embedding, which updates its inputs in place,
through rotary_embedding_backward, and fused_add_rms_norm, in place too,
through rms_norm_backward with its grad_residual):
gradients against each framework's own autograd of a reference written with
its own ops, on fresh random inputs — torch.autograd.gradcheck in float64,
torch.compile (fullgraph, the backward graph too), opcheck's autograd tests,
jax.grad under jit and vmap for both api_versions; an output the backward
takes no gradient of (rstd) is not differentiable; and a small training loop
whose loss curve matches the reference model's in both frameworks. GPU
variants skip without a GPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import op_references as ref
import opgen_ops.jax as jops
import opgen_ops.torch as tops
from conftest import gpu_devices

CPU = jax.devices("cpu")[0]
EPS = 1e-5


def torch_reference(x, weight=None, bias=None):
    out = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS)
    out = out * weight if weight is not None else out
    return out + bias if bias is not None else out


def jax_reference(x, weight=None, bias=None):
    out = x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + EPS)
    out = out * weight if weight is not None else out
    return out + bias if bias is not None else out


def torch_layer_norm(x, weight=None, bias=None):
    return torch.nn.functional.layer_norm(x, [x.shape[-1]], weight, bias, EPS)


def jax_layer_norm(x, weight=None, bias=None):
    mean = x.mean(-1, keepdims=True)
    out = (x - mean) * jax.lax.rsqrt(((x - mean) ** 2).mean(-1, keepdims=True) + EPS)
    out = out * weight if weight is not None else out
    return out + bias if bias is not None else out


# The norms with a backward op: each one's torch and JAX reference, written with the framework's own ops.
NORMS = {"rms_norm": (torch_reference, jax_reference), "layer_norm": (torch_layer_norm, jax_layer_norm)}


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("given", ["x", "x, weight", "x, weight, bias"])
def test_torch_gradcheck_in_float64(rng, norm, given):
    n = len(given.split(","))
    tensors = [torch.from_numpy(rng.standard_normal(shape)).requires_grad_() for shape in [(2, 3, 16), (16,), (16,)][:n]]
    assert torch.autograd.gradcheck(lambda *t: getattr(tops, norm)(*t, eps=EPS)[0], tensors)


def check_torch_gradients(rng, device, compiled, norm="rms_norm"):
    x, w, b = (torch.from_numpy(rng.standard_normal(s).astype(np.float32)).to(device).requires_grad_()
               for s in [(4, 5, 32), (32,), (32,)])
    cotangent = torch.from_numpy(rng.standard_normal((4, 5, 32)).astype(np.float32)).to(device)

    def loss(x, w, b):
        return (getattr(tops, norm)(x, w, b, eps=EPS)[0] * cotangent).sum()

    (torch.compile(loss, fullgraph=True) if compiled else loss)(x, w, b).backward()
    ours = [t.grad for t in (x, w, b)]
    refs = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    (NORMS[norm][0](*refs) * cotangent).sum().backward()
    for got, want in zip(ours, [t.grad for t in refs]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("compiled", [False, True])
def test_torch_gradients_match_torch_autograd(rng, compiled, norm):
    check_torch_gradients(rng, "cpu", compiled, norm)


@pytest.mark.parametrize("norm", NORMS)
def test_torch_opcheck_with_autograd(rng, norm):
    x, w, b = (torch.from_numpy(rng.standard_normal(s).astype(np.float32)).requires_grad_() for s in [(3, 8), (8,), (8,)])
    torch.library.opcheck(getattr(torch.ops.opgen_ops, norm).default, (x, w, b), {"eps": EPS},
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))


def test_rstd_is_not_differentiable(rng):
    x = torch.from_numpy(rng.standard_normal((3, 8))).requires_grad_()
    out, rstd = tops.rms_norm(x)
    assert out.requires_grad and not rstd.requires_grad
    with pytest.raises(TypeError, match=r"rms_norm: output 'rstd' is not differentiable"):
        jax.grad(lambda a: jops.rms_norm(a)[1].sum())(jax.device_put(rng.standard_normal((3, 8)).astype(np.float32), CPU))


def check_jax_gradients(rng, device, api_version, norm="rms_norm"):
    op, reference = getattr(jops, norm), NORMS[norm][1]
    x, w, b, cotangent = (rng.standard_normal(s).astype(np.float32) for s in [(4, 5, 32), (32,), (32,), (4, 5, 32)])
    args = [jax.device_put(a, device) for a in (x, w, b)]
    ours = jax.jit(jax.grad(lambda *a: (op(*a, eps=EPS, api_version=api_version)[0] * cotangent).sum(),
                            argnums=(0, 1, 2)))(*args)
    want = jax.grad(lambda *a: (reference(*a) * cotangent).sum(), argnums=(0, 1, 2))(*args)
    for got, expected in zip(ours, want):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-4, atol=1e-4)
    # Per example under vmap: the gradient of each row's loss.
    per_row = jax.vmap(jax.grad(lambda r: (op(r, eps=EPS, api_version=api_version)[0] * r[::-1]).sum()))(args[0])
    want_rows = jax.vmap(jax.grad(lambda r: (reference(r) * r[::-1]).sum()))(args[0])
    np.testing.assert_allclose(np.asarray(per_row), np.asarray(want_rows), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_grad_matches_jax_autodiff(rng, api_version, norm):
    check_jax_gradients(rng, CPU, api_version, norm)


def test_jax_grad_without_weight_or_bias(rng):
    x = jax.device_put(rng.standard_normal((6, 16)).astype(np.float32), CPU)
    got = jax.grad(lambda a: jops.rms_norm(a, eps=EPS)[0].sum())(x)
    want = jax.grad(lambda a: jax_reference(a).sum())(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)


# --- A training loop: h = swiglu(rms_norm(x @ W1) * w); y = h @ W2; mean squared error ------


def training_data(rng):
    d = {k: rng.standard_normal(s).astype(np.float32) * scale for k, s, scale in
         [("x", (64, 16), 1.0), ("w1", (16, 32), 0.3), ("norm", (32,), 0.1), ("w2", (16, 4), 0.3)]}
    d["norm"] += 1  # a norm weight near 1, as a layer starts
    d["y"] = np.tanh(d["x"] @ rng.standard_normal((16, 4)).astype(np.float32) * 0.5)  # a target it can learn
    return d


def test_training_loss_curves_match_in_both_frameworks(rng):
    d = training_data(rng)

    def torch_curve(layer_fn):
        p = {k: torch.from_numpy(d[k].copy()).requires_grad_() for k in ("w1", "norm", "w2")}
        x, y, losses = torch.from_numpy(d["x"]), torch.from_numpy(d["y"]), []
        for _ in range(20):
            loss = ((layer_fn(x @ p["w1"], p["norm"]) @ p["w2"] - y) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                for t in p.values():
                    t -= 0.3 * t.grad
                    t.grad = None
            losses.append(loss.item())
        return losses

    def jax_curve(layer_fn):
        p = {k: jnp.asarray(d[k]) for k in ("w1", "norm", "w2")}
        step = jax.jit(jax.value_and_grad(lambda p: ((layer_fn(d["x"] @ p["w1"], p["norm"]) @ p["w2"] - d["y"]) ** 2).mean()))
        losses = []
        for _ in range(20):
            loss, grads = step(p)
            p = jax.tree.map(lambda a, g: a - 0.3 * g, p, grads)
            losses.append(float(loss))
        return losses

    def torch_swiglu(h):
        a, b = h.chunk(2, -1)
        return a * torch.nn.functional.silu(b)

    def jax_swiglu(h):
        a, b = jnp.split(h, 2, axis=-1)
        return a * jax.nn.silu(b)

    curves = [
        (torch_curve(lambda h, w: tops.glu(tops.rms_norm(h, w, eps=EPS)[0], activation="silu")),
         torch_curve(lambda h, w: torch_swiglu(torch_reference(h, w)))),
        (jax_curve(lambda h, w: jops.glu(jops.rms_norm(h, w, eps=EPS)[0], activation="silu")),
         jax_curve(lambda h, w: jax_swiglu(jax_reference(h, w)))),
    ]
    for ours, reference in curves:
        # It trains: the loss falls at every step, by a tenth at least over the twenty.
        assert all(b < a for a, b in zip(ours, ours[1:])) and ours[-1] < 0.9 * ours[0], ours
        np.testing.assert_allclose(ours, reference, rtol=1e-3)


# --- GPU ------------------------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("compiled", [False, True])
def test_torch_cuda_gradients_match_torch_autograd(rng, compiled, norm):
    check_torch_gradients(rng, "cuda", compiled, norm)


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_cuda_grad_matches_jax_autodiff(rng, api_version, norm):
    check_jax_gradients(rng, gpu_devices()[0], api_version, norm)


# rms_norm_backward's CUDA body reads each row once where rows are dense and
# fit a block's registers (1, 2 or 4 vectors of 16 bytes per thread), and twice
# otherwise (an odd D, a broadcast grad_out, rows wider than 4 vectors).
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("dtype, d, broadcast", [
    ("float32", 1024, False), ("float32", 2048, False), ("float32", 4096, False), ("bfloat16", 8192, False),
    ("float64", 1000, False), ("bfloat16", 1023, False), ("float16", 4096, True), ("float32", 8192, False)])
def test_rms_norm_backward_cuda_body_matches_the_cpu_body(rng, dtype, d, broadcast):
    rows = 300  # more than one row per slice of the column sums in some slices, none in others
    x = torch.from_numpy(rng.standard_normal((rows, d))).to(getattr(torch, dtype))
    w = torch.from_numpy(rng.standard_normal(d)).to(x.dtype)
    g = torch.from_numpy(rng.standard_normal((1, d) if broadcast else (rows, d))).to(x.dtype).expand(rows, d)
    on_cpu = tops.rms_norm_backward(g, x, w, eps=EPS)
    on_gpu = tops.rms_norm_backward(g.cuda(), x.cuda(), w.cuda(), eps=EPS)
    for name, a, b in zip(("grad_x", "grad_weight", "grad_bias"), on_gpu, on_cpu):
        want = b.double()
        err = ((a.cpu().double() - want).norm() / max(want.norm(), 1.0)).item()
        assert err < ref.CROSS_DEVICE_TOLERANCE[dtype], f"{name}: relative error {err:.3g}"


# --- glu, through glu_backward: every activation ----------------------------------------------

GATES_TORCH = {"sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu,
               "gelu": lambda b: torch.nn.functional.gelu(b, approximate="none")}
GATES_JAX = {"sigmoid": jax.nn.sigmoid, "silu": jax.nn.silu, "gelu": lambda b: jax.nn.gelu(b, approximate=False)}


@pytest.mark.parametrize("activation", list(GATES_TORCH))
def test_glu_torch_gradcheck_in_float64(rng, activation):
    x = torch.from_numpy(rng.standard_normal((2, 3, 8))).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: tops.glu(t, activation=activation), (x,))


@pytest.mark.parametrize("activation", list(GATES_TORCH))
@pytest.mark.parametrize("compiled", [False, True])
def test_glu_torch_gradients_match_torch_autograd(rng, activation, compiled):
    x = torch.from_numpy(rng.standard_normal((4, 16)).astype(np.float32)).requires_grad_()
    f = lambda t: (tops.glu(t, activation=activation) ** 2).sum()  # noqa: E731
    (torch.compile(f, fullgraph=True) if compiled else f)(x).backward()
    ref = x.detach().clone().requires_grad_()
    a, b = ref.chunk(2, -1)
    ((a * GATES_TORCH[activation](b)) ** 2).sum().backward()
    torch.testing.assert_close(x.grad, ref.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation", list(GATES_JAX))
@pytest.mark.parametrize("api_version", [4, 3])
def test_glu_jax_grad_matches_jax_autodiff(rng, activation, api_version):
    x = jax.device_put(rng.standard_normal((3, 5, 16)).astype(np.float32), CPU)
    got = jax.jit(jax.grad(lambda t: (jops.glu(t, activation=activation, api_version=api_version) ** 2).sum()))(x)

    def reference(t):
        a, b = jnp.split(t, 2, axis=-1)
        return ((a * GATES_JAX[activation](b)) ** 2).sum()

    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.grad(reference)(x)), rtol=1e-4, atol=1e-5)
    # glu maps under vmap by adding a batch dimension (vmap_method broadcast_all); its backward too.
    per_example = jax.vmap(jax.grad(lambda t: (jops.glu(t, activation=activation, api_version=api_version) ** 2).sum()))(x)
    np.testing.assert_allclose(np.asarray(per_example), np.asarray(jax.vmap(jax.grad(reference))(x)), rtol=1e-4, atol=1e-5)


# --- rotary_embedding, in place, through rotary_embedding_backward -----------------------------
# References written with each framework's own ops: the pairs of every head's first R
# dimensions rotated by the angles of the token's position, tokens whose position is
# outside [0, P) left as they are (as the spec says).

ROTARY = dict(tokens=6, heads=4, kv_heads=2, head_size=16, positions=12, rotary=8)


def rotary_inputs(rng, dtype=np.float64):
    n, h, kvh, d, p, r = (ROTARY[k] for k in ("tokens", "heads", "kv_heads", "head_size", "positions", "rotary"))
    positions = rng.integers(0, p, n)
    positions[1] = p + 3  # out of range: that token is left as it is, and so is its gradient
    return (positions, rng.standard_normal((n, h * d)).astype(dtype), rng.standard_normal((p, r)).astype(dtype),
            rng.standard_normal((n, kvh * d)).astype(dtype))


def rotate_reference(xp, x, positions, cache, is_neox):
    """x [N, heads * head_size] rotated with the ops of `xp` (torch or jax.numpy)."""
    d, r = ROTARY["head_size"], cache.shape[1]
    valid = (positions >= 0) & (positions < cache.shape[0])
    rows = cache[xp.where(valid, positions, 0)]
    cos = xp.where(valid[:, None], rows[:, :r // 2], 1.0)[:, None, :]
    sin = xp.where(valid[:, None], rows[:, r // 2:], 0.0)[:, None, :]
    heads = x.reshape(x.shape[0], -1, d)
    if is_neox:
        a, b, rest = heads[..., :r // 2], heads[..., r // 2:r], heads[..., r:]
        return xp.concatenate([a * cos - b * sin, b * cos + a * sin, rest], -1).reshape(x.shape)
    a, b, rest = heads[..., 0:r:2], heads[..., 1:r:2], heads[..., r:]
    pairs = xp.stack([a * cos - b * sin, b * cos + a * sin], -1).reshape(*a.shape[:-1], r)
    return xp.concatenate([pairs, rest], -1).reshape(x.shape)


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("with_key", [True, False])
def test_rotary_torch_gradcheck_in_float64(rng, is_neox, with_key):
    positions, q, cache, k = rotary_inputs(rng)
    positions, cache = torch.from_numpy(positions), torch.from_numpy(cache)
    leaves = [torch.from_numpy(q).requires_grad_()] + ([torch.from_numpy(k).requires_grad_()] if with_key else [])

    def f(*leaves):  # in place on copies: a leaf that requires grad cannot be updated in place
        outs = tops.rotary_embedding(positions, leaves[0] * 1.0, cache, leaves[1] * 1.0 if with_key else None,
                                     head_size=ROTARY["head_size"], is_neox=is_neox)
        return outs[0] if not with_key else outs

    assert torch.autograd.gradcheck(f, leaves)


def check_rotary_torch_gradients(rng, device, compiled):
    """rotary on the query and key column views of one fused qkv projection, as
    vLLM calls it: the gradient reaches the projection's input through the
    in-place update of the views."""
    positions, _, cache, _ = rotary_inputs(rng, np.float32)
    positions, cache = torch.from_numpy(positions).to(device), torch.from_numpy(cache).to(device)
    qd = ROTARY["heads"] * ROTARY["head_size"]
    kd = ROTARY["kv_heads"] * ROTARY["head_size"]
    x = torch.from_numpy(rng.standard_normal((ROTARY["tokens"], 32)).astype(np.float32)).to(device).requires_grad_()
    w = torch.from_numpy(rng.standard_normal((32, qd + 2 * kd)).astype(np.float32)).to(device)
    t = torch.from_numpy(rng.standard_normal((ROTARY["tokens"], qd + 2 * kd)).astype(np.float32)).to(device)

    def ours(x):
        qkv = x @ w
        q, k = qkv[:, :qd], qkv[:, qd:qd + kd]
        tops.rotary_embedding(positions, q, cache, k, head_size=ROTARY["head_size"])
        return (qkv * t).sum()

    def reference(x):
        q, k, v = (x @ w).split([qd, kd, kd], -1)
        q, k = (rotate_reference(torch, a, positions, cache, True) for a in (q, k))
        return (torch.cat([q, k, v], -1) * t).sum()

    (torch.compile(ours, fullgraph=True) if compiled else ours)(x).backward()
    want = torch.autograd.grad(reference(x), x)[0]
    torch.testing.assert_close(x.grad, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("compiled", [False, True])
def test_rotary_torch_gradients_match_torch_autograd(rng, compiled):
    check_rotary_torch_gradients(rng, "cpu", compiled)


def test_rotary_without_backward_through_the_op_namespace_is_torchs_behaviour(rng):
    # The autograd glue lives in opgen_ops.torch.rotary_embedding; torch.ops.opgen_ops.rotary_embedding
    # is the bare kernel, which may not update a leaf that requires grad.
    positions, q, cache, _ = rotary_inputs(rng)
    leaf = torch.from_numpy(q).requires_grad_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        tops.rotary_embedding(torch.from_numpy(positions), leaf, torch.from_numpy(cache), head_size=16)


def check_rotary_jax_gradients(rng, device, api_version):
    positions, q, cache, k = (jax.device_put(a, device) for a in rotary_inputs(rng, np.float32))
    positions = positions.astype(np.int32)
    tq, tk = (rng.standard_normal(a.shape).astype(np.float32) for a in (q, k))
    for is_neox in (True, False):
        def ours(q, k):
            qo, ko = jops.rotary_embedding(positions, q, cache, k, head_size=ROTARY["head_size"], is_neox=is_neox,
                                           api_version=api_version)
            return (qo * tq).sum() + (ko * tk).sum()

        def reference(q, k):
            return ((rotate_reference(jnp, q, positions, cache, is_neox) * tq).sum()
                    + (rotate_reference(jnp, k, positions, cache, is_neox) * tk).sum())

        got = jax.jit(jax.grad(ours, argnums=(0, 1)))(q, k)
        for a, b in zip(got, jax.grad(reference, argnums=(0, 1))(q, k)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
        # Without the key, only the query's gradient.
        only_q = jax.grad(lambda q: (jops.rotary_embedding(positions, q, cache, head_size=ROTARY["head_size"],
                                                            is_neox=is_neox, api_version=api_version)[0] * tq).sum())(q)
        want = jax.grad(lambda q: (rotate_reference(jnp, q, positions, cache, is_neox) * tq).sum())(q)
        np.testing.assert_allclose(np.asarray(only_q), np.asarray(want), rtol=1e-5, atol=1e-5)
    # Per example under vmap: a batch of calls, each with its own positions.
    positions3 = jnp.stack([positions, positions[::-1], jnp.zeros_like(positions)])
    q3, k3 = jnp.stack([q, 2 * q, -q]), jnp.stack([k, k[::-1], 3 * k])

    def per_call(f):
        return jax.vmap(jax.grad(lambda p, q, k: (f(p, q, k)[0] ** 2).sum() + (f(p, q, k)[1] ** 2).sum(),
                                 argnums=(1, 2)))(positions3, q3, k3)

    got = jax.jit(lambda: per_call(lambda p, q, k: jops.rotary_embedding(
        p, q, cache, k, head_size=ROTARY["head_size"], api_version=api_version)))()
    want = per_call(lambda p, q, k: tuple(rotate_reference(jnp, a, p, cache, True) for a in (q, k)))
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("api_version", [4, 3])
def test_rotary_jax_grad_matches_jax_autodiff(rng, api_version):
    check_rotary_jax_gradients(rng, CPU, api_version)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("compiled", [False, True])
def test_rotary_torch_cuda_gradients_match_torch_autograd(rng, compiled):
    check_rotary_torch_gradients(rng, "cuda", compiled)


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("api_version", [4, 3])
def test_rotary_jax_cuda_grad_matches_jax_autodiff(rng, api_version):
    check_rotary_jax_gradients(rng, gpu_devices()[0], api_version)


# --- fused_add_rms_norm, in place, through rms_norm_backward ------------------------------------

def fused_reference(x, residual, weight):
    """(x_out, residual_out) with the ops of torch or jax.numpy (both have the methods used)."""
    r = x + residual
    return r / ((r * r).mean(-1, keepdims=True) + EPS) ** 0.5 * weight, r


@pytest.mark.parametrize("x_is_a_view", [False, True])
def test_fused_add_rms_norm_torch_gradcheck_in_float64(rng, x_is_a_view):
    x, residual = (torch.from_numpy(rng.standard_normal((2, 3, 16))).requires_grad_() for _ in range(2))
    weight = torch.from_numpy(rng.standard_normal(16)).requires_grad_()
    wide = torch.from_numpy(rng.standard_normal((2, 3, 40)))

    def f(x, residual, weight):
        if x_is_a_view:  # x's rows strided, as in a fused projection's output
            x = torch.cat([x, wide[..., 16:]], -1)[..., :16]
        return tops.fused_add_rms_norm(x * 1.0 if not x_is_a_view else x, residual * 1.0, weight, eps=EPS)

    assert torch.autograd.gradcheck(f, (x, residual, weight))


def check_fused_torch_gradients(rng, device, compiled):
    x, residual, t1, t2 = (torch.from_numpy(rng.standard_normal((4, 5, 64)).astype(np.float32)).to(device)
                           for _ in range(4))
    weight = torch.from_numpy(rng.standard_normal(64).astype(np.float32)).to(device)
    leaves = [a.clone().requires_grad_() for a in (x, residual, weight)]

    def ours(x, residual, weight):
        x, residual = x * 1.0, residual * 1.0
        tops.fused_add_rms_norm(x, residual, weight, eps=EPS)  # in place
        return (x * t1).sum() + (residual * t2).sum()

    (torch.compile(ours, fullgraph=True) if compiled else ours)(*leaves).backward()
    refs = [a.clone().requires_grad_() for a in (x, residual, weight)]
    y, r = fused_reference(*refs)
    ((y * t1).sum() + (r * t2).sum()).backward()
    for got, want in zip(leaves, refs):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("compiled", [False, True])
def test_fused_add_rms_norm_torch_gradients_match_torch_autograd(rng, compiled):
    check_fused_torch_gradients(rng, "cpu", compiled)


def check_fused_jax_gradients(rng, device, api_version):
    x, residual, t1, t2 = (jax.device_put(rng.standard_normal((4, 5, 64)).astype(np.float32), device)
                           for _ in range(4))
    weight = jax.device_put(rng.standard_normal(64).astype(np.float32), device)

    def loss(f):
        def g(x, residual, weight):
            y, r = f(x, residual, weight)
            return (y * t1).sum() + (r * t2).sum()
        return g

    ours = jax.jit(jax.grad(loss(lambda *a: jops.fused_add_rms_norm(*a, eps=EPS, api_version=api_version)),
                            argnums=(0, 1, 2)))(x, residual, weight)
    want = jax.grad(loss(fused_reference), argnums=(0, 1, 2))(x, residual, weight)
    for got, ref in zip(ours, want):
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-4, atol=1e-4)
    # Per example under vmap (each example a [5, 64] slice of the batch).
    def per_example(f):
        return jax.vmap(jax.grad(loss(f), argnums=(0, 1)), in_axes=(0, 0, None))

    got = jax.jit(per_example(lambda *a: jops.fused_add_rms_norm(*a, eps=EPS, api_version=api_version)))(
        x, residual, weight)
    want = per_example(fused_reference)(x, residual, weight)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("api_version", [4, 3])
def test_fused_add_rms_norm_jax_grad_matches_jax_autodiff(rng, api_version):
    check_fused_jax_gradients(rng, CPU, api_version)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("compiled", [False, True])
def test_fused_add_rms_norm_torch_cuda_gradients_match_torch_autograd(rng, compiled):
    check_fused_torch_gradients(rng, "cuda", compiled)


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("api_version", [4, 3])
def test_fused_add_rms_norm_jax_cuda_grad_matches_jax_autodiff(rng, api_version):
    check_fused_jax_gradients(rng, gpu_devices()[0], api_version)


# rms_norm_backward's grad_residual (fused_add_rms_norm's path): the CUDA body against the CPU
# body, dense (the one-pass kernel) and broadcast (the two-pass one).
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("dtype, d, broadcast", [("float32", 2048, False), ("bfloat16", 4096, False),
                                                 ("float32", 1000, True), ("float64", 512, False)])
def test_rms_norm_backward_grad_residual_cuda_body_matches_the_cpu_body(rng, dtype, d, broadcast):
    rows = 300
    g, x, gr = (torch.from_numpy(rng.standard_normal((rows, d))).to(getattr(torch, dtype)) for _ in range(3))
    w = torch.from_numpy(rng.standard_normal(d)).to(x.dtype)
    if broadcast:
        gr = gr[:1].expand(rows, d)
    on_cpu = tops.rms_norm_backward(g, x, w, gr, eps=EPS)
    on_gpu = tops.rms_norm_backward(g.cuda(), x.cuda(), w.cuda(), gr.cuda(), eps=EPS)
    for name, a, b in zip(("grad_x", "grad_weight", "grad_bias"), on_gpu, on_cpu):
        want = b.double()
        err = ((a.cpu().double() - want).norm() / max(want.norm(), 1.0)).item()
        assert err < ref.CROSS_DEVICE_TOLERANCE[dtype], f"{name}: relative error {err:.3g}"
