"""Ops whose spec declares a backward (rms_norm through rms_norm_backward, glu
through glu_backward):
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


@pytest.mark.parametrize("given", ["x", "x, weight", "x, weight, bias"])
def test_torch_gradcheck_in_float64(rng, given):
    n = len(given.split(","))
    tensors = [torch.from_numpy(rng.standard_normal(shape)).requires_grad_() for shape in [(2, 3, 16), (16,), (16,)][:n]]
    assert torch.autograd.gradcheck(lambda *t: tops.rms_norm(*t, eps=EPS)[0], tensors)


def check_torch_gradients(rng, device, compiled):
    x, w, b = (torch.from_numpy(rng.standard_normal(s).astype(np.float32)).to(device).requires_grad_()
               for s in [(4, 5, 32), (32,), (32,)])
    cotangent = torch.from_numpy(rng.standard_normal((4, 5, 32)).astype(np.float32)).to(device)

    def loss(x, w, b):
        return (tops.rms_norm(x, w, b, eps=EPS)[0] * cotangent).sum()

    (torch.compile(loss, fullgraph=True) if compiled else loss)(x, w, b).backward()
    ours = [t.grad for t in (x, w, b)]
    refs = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    (torch_reference(*refs) * cotangent).sum().backward()
    for got, want in zip(ours, [t.grad for t in refs]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("compiled", [False, True])
def test_torch_gradients_match_torch_autograd(rng, compiled):
    check_torch_gradients(rng, "cpu", compiled)


def test_torch_opcheck_with_autograd(rng):
    x, w, b = (torch.from_numpy(rng.standard_normal(s).astype(np.float32)).requires_grad_() for s in [(3, 8), (8,), (8,)])
    torch.library.opcheck(torch.ops.opgen_ops.rms_norm.default, (x, w, b), {"eps": EPS},
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))


def test_rstd_is_not_differentiable(rng):
    x = torch.from_numpy(rng.standard_normal((3, 8))).requires_grad_()
    out, rstd = tops.rms_norm(x)
    assert out.requires_grad and not rstd.requires_grad
    with pytest.raises(TypeError, match=r"rms_norm: output 'rstd' is not differentiable"):
        jax.grad(lambda a: jops.rms_norm(a)[1].sum())(jax.device_put(rng.standard_normal((3, 8)).astype(np.float32), CPU))


def check_jax_gradients(rng, device, api_version):
    x, w, b, cotangent = (rng.standard_normal(s).astype(np.float32) for s in [(4, 5, 32), (32,), (32,), (4, 5, 32)])
    args = [jax.device_put(a, device) for a in (x, w, b)]
    ours = jax.jit(jax.grad(lambda *a: (jops.rms_norm(*a, eps=EPS, api_version=api_version)[0] * cotangent).sum(),
                            argnums=(0, 1, 2)))(*args)
    want = jax.grad(lambda *a: (jax_reference(*a) * cotangent).sum(), argnums=(0, 1, 2))(*args)
    for got, ref in zip(ours, want):
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-4, atol=1e-4)
    # Per example under vmap: the gradient of each row's loss.
    per_row = jax.vmap(jax.grad(lambda r: (jops.rms_norm(r, eps=EPS, api_version=api_version)[0] * r[::-1]).sum()))(
        args[0])
    want_rows = jax.vmap(jax.grad(lambda r: (jax_reference(r) * r[::-1]).sum()))(args[0])
    np.testing.assert_allclose(np.asarray(per_row), np.asarray(want_rows), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_grad_matches_jax_autodiff(rng, api_version):
    check_jax_gradients(rng, CPU, api_version)


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
@pytest.mark.parametrize("compiled", [False, True])
def test_torch_cuda_gradients_match_torch_autograd(rng, compiled):
    check_torch_gradients(rng, "cuda", compiled)


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_cuda_grad_matches_jax_autodiff(rng, api_version):
    check_jax_gradients(rng, gpu_devices()[0], api_version)


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
