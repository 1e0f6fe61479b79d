"""softmax (over the last axis) and its backward, softmax_backward: an op with
a backward and no attributes at all. Forward against jax.nn.softmax and
torch.softmax in float64 and against the float64 reference in every dtype;
empty rows and batches; rows with -inf (a row all -inf is NaN, as in torch);
gradients against each framework's own softmax gradients (jax.grad under jit
and vmap, both api_versions; torch .backward(), eager and torch.compile, with
a broadcast gradient; gradcheck in float64; opcheck's autograd tests). GPU
variants skip without a GPU.

The torch autograd tests need runtime/python/_torch_autograd.py's
setup_context to take an op whose schema has no keyword-only arguments
(torch then passes no keyword_only_inputs)."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch

import op_references as ref
import opgen_ops.jax as jops
import opgen_ops.torch as tops
from conftest import gpu_devices
from torch_arrays import as_numpy, to_torch

CPU = jax.devices("cpu")[0]
NUMPY = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64}
SHAPES = [(7,), (3, 5, 16), (2, 300), (4, 1)]
requires_torch_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
requires_jax_gpu = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


def logits(rng, shape, dtype="float64", scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(NUMPY[dtype])


# --- Forward ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("shape", SHAPES)
def test_jax_matches_jax_nn_softmax_in_float64(rng, api_version, shape):
    with jax.enable_x64(True):
        x = jax.device_put(logits(rng, shape), CPU)
        out = jax.jit(lambda x: jops.softmax(x, api_version=api_version))(x)
        assert out.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(out), np.asarray(jax.nn.softmax(x, axis=-1)), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("shape", SHAPES)
def test_torch_matches_torch_softmax_in_float64(rng, shape):
    x = torch.from_numpy(logits(rng, shape))
    out = tops.softmax(x)
    assert out.dtype == torch.float64 and out.shape == x.shape
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(torch.ops.opgen_ops.softmax(x), out, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("api_version", [4, 3])
def test_every_dtype_against_the_float64_reference(rng, dtype, api_version):
    x = logits(rng, (3, 5, 40), dtype)
    want = ref.softmax(x)
    out = jax.jit(lambda x: jops.softmax(x, api_version=api_version))(jax.device_put(x, CPU))
    assert out.dtype == x.dtype
    assert ref.relative_error(out, want) < ref.TOLERANCE[dtype]
    got = tops.softmax(to_torch(x))
    assert ref.relative_error(as_numpy(got), want) < ref.TOLERANCE[dtype]


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5), (2, 0, 4), (0, 0)])
def test_empty_rows_and_batches(shape):
    x = np.zeros(shape, np.float32)
    for v in (4, 3):
        out = jax.jit(lambda x, v=v: jops.softmax(x, api_version=v))(jax.device_put(x, CPU))
        assert out.shape == shape
        grad = jops.softmax_backward(jnp.asarray(x), jnp.asarray(x), api_version=v)
        assert grad.shape == shape
    assert tops.softmax(torch.from_numpy(x)).shape == shape
    assert tops.softmax_backward(torch.from_numpy(x), torch.from_numpy(x)).shape == shape


def test_minus_infinity_as_torch():
    x = torch.tensor([[0.0, -float("inf"), 1.0, -float("inf")],  # masked entries: 0
                      [-float("inf")] * 4,  # a row all -inf: NaN, as torch gives
                      [5.0, 5.0, 5.0, 5.0]], dtype=torch.float64)
    want = torch.softmax(x, -1)
    assert torch.isnan(want[1]).all()
    torch.testing.assert_close(tops.softmax(x), want, equal_nan=True)
    torch.testing.assert_close(tops.softmax(x.float()), want.float(), equal_nan=True)
    got = jops.softmax(jnp.asarray(x.float().numpy()))
    np.testing.assert_allclose(np.asarray(got), want.float().numpy(), rtol=1e-6, equal_nan=True)


def test_large_logits_do_not_overflow(rng):
    x = logits(rng, (4, 64), "float32") + np.float32(1e4)  # exp(1e4) overflows without the max subtracted
    out = jops.softmax(jax.device_put(x, CPU))
    assert ref.relative_error(out, ref.softmax(x)) < ref.TOLERANCE["float32"]


# --- Gradients: JAX -------------------------------------------------------------------------------


def check_jax_gradients(rng, device, api_version):
    x, cotangent = (jax.device_put(rng.standard_normal((4, 5, 33)).astype(np.float32), device) for _ in range(2))

    def loss(f):
        return lambda x: (f(x) * cotangent).sum()

    ours = jax.jit(jax.grad(loss(lambda x: jops.softmax(x, api_version=api_version))))(x)
    want = jax.grad(loss(lambda x: jax.nn.softmax(x, axis=-1)))(x)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(want), rtol=1e-5, atol=1e-6)
    # Per example under vmap (broadcast_all: the mapped axis becomes one more leading dimension).
    per_row = jax.jit(jax.vmap(jax.grad(lambda r: (jops.softmax(r, api_version=api_version) * r[..., ::-1]).sum())))(x)
    want_rows = jax.vmap(jax.grad(lambda r: (jax.nn.softmax(r, axis=-1) * r[..., ::-1]).sum()))(x)
    np.testing.assert_allclose(np.asarray(per_row), np.asarray(want_rows), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_grad_matches_jax_autodiff(rng, api_version):
    check_jax_gradients(rng, CPU, api_version)


def test_jax_grad_in_float64(rng):
    with jax.enable_x64(True):
        x = jax.device_put(logits(rng, (3, 17)), CPU)
        t = jax.device_put(rng.standard_normal((3, 17)), CPU)
        ours = jax.grad(lambda x: (jops.softmax(x) * t).sum())(x)
        want = jax.grad(lambda x: (jax.nn.softmax(x, axis=-1) * t).sum())(x)
        assert ours.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(ours), np.asarray(want), rtol=1e-12, atol=1e-14)


# --- Gradients: PyTorch ---------------------------------------------------------------------------


def test_torch_gradcheck_in_float64(rng):
    x = torch.from_numpy(logits(rng, (2, 3, 8), scale=1.0)).requires_grad_()
    assert torch.autograd.gradcheck(tops.softmax, (x,))


def check_torch_gradients(rng, device, compiled, broadcast):
    x = torch.from_numpy(rng.standard_normal((4, 5, 32)).astype(np.float32)).to(device).requires_grad_()
    # A weight of shape [32]: autograd hands softmax's backward the gradient broadcast (stride 0).
    shape = (32,) if broadcast else (4, 5, 32)
    weight = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(device)

    def loss(x):
        return (tops.softmax(x) * weight).sum()

    (torch.compile(loss, fullgraph=True) if compiled else loss)(x).backward()
    reference = x.detach().clone().requires_grad_()
    (torch.softmax(reference, -1) * weight).sum().backward()
    torch.testing.assert_close(x.grad, reference.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("broadcast", [False, True])
@pytest.mark.parametrize("compiled", [False, True])
def test_torch_gradients_match_torch_autograd(rng, compiled, broadcast):
    check_torch_gradients(rng, "cpu", compiled, broadcast)


def test_torch_opcheck_with_autograd(rng):
    x = torch.from_numpy(rng.standard_normal((3, 8)).astype(np.float32)).requires_grad_()
    torch.library.opcheck(torch.ops.opgen_ops.softmax.default, (x,), {},
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))


def test_softmax_backward_takes_a_broadcast_gradient(rng):
    out = tops.softmax(torch.from_numpy(logits(rng, (6, 10))))
    g = torch.from_numpy(rng.standard_normal(10)).expand(6, 10)
    assert g.stride() == (0, 1)
    want = out * (g - (g * out).sum(-1, keepdim=True))
    torch.testing.assert_close(tops.softmax_backward(g, out), want, rtol=1e-13, atol=1e-15)


# --- GPU ------------------------------------------------------------------------------------------
# Rows wider than the CUDA body's block (256 threads), odd widths, and a row of one.

GPU_SHAPES = [(1, 7), (4, 128), (3, 5, 4096), (2, 8192 + 3), (300, 1)]


@requires_jax_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_jax_cuda_body_against_the_reference(rng, dtype, api_version, shape):
    x = logits(rng, shape, dtype)
    out = jax.jit(lambda x: jops.softmax(x, api_version=api_version))(jax.device_put(x, gpu_devices()[0]))
    assert ref.relative_error(out, ref.softmax(x)) < ref.TOLERANCE[dtype]


@requires_torch_cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_torch_cuda_body_against_the_reference(rng, dtype, shape):
    x = logits(rng, shape, dtype)
    want = ref.softmax(x)
    out = tops.softmax(to_torch(x, "cuda"))
    assert out.device.type == "cuda"
    assert ref.relative_error(as_numpy(out), want) < ref.CROSS_DEVICE_TOLERANCE[dtype]
    # The backward's body too, with a broadcast gradient.
    g = torch.from_numpy(rng.standard_normal(shape[-1:])).to(out.dtype)
    on_gpu = tops.softmax_backward(g.cuda().expand(shape), out)
    on_cpu = tops.softmax_backward(g.expand(shape), out.cpu())
    err = ((on_gpu.cpu().double() - on_cpu.double()).norm() / max(on_cpu.double().norm(), 1.0)).item()
    assert err < ref.CROSS_DEVICE_TOLERANCE[dtype], f"softmax_backward: relative error {err:.3g}"


@requires_torch_cuda
def test_torch_cuda_minus_infinity_as_torch():
    x = torch.tensor([[0.0, -float("inf"), 1.0], [-float("inf")] * 3], device="cuda")
    torch.testing.assert_close(tops.softmax(x), torch.softmax(x, -1), equal_nan=True)


@requires_torch_cuda
@pytest.mark.parametrize("broadcast", [False, True])
@pytest.mark.parametrize("compiled", [False, True])
def test_torch_cuda_gradients_match_torch_autograd(rng, compiled, broadcast):
    check_torch_gradients(rng, "cuda", compiled, broadcast)


@requires_jax_gpu
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_cuda_grad_matches_jax_autodiff(rng, api_version):
    check_jax_gradients(rng, gpu_devices()[0], api_version)
