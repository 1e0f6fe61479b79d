"""layer_norm and its backward, layer_norm_backward, against each framework's
own layer norm on fresh random inputs: the output and the statistics
(torch.native_layer_norm's mean and rstd: outputs on request, None unless
asked for, f32 or f64 for f64), a row
whose mean dwarfs its spread (no cancellation), and the CUDA bodies against
the CPU bodies at every width their kernels branch on. Its gradients (gradcheck,
torch autograd eager and compiled, opcheck, jax.grad under jit and vmap) are
test_backward.py's, one test for both norms. GPU tests skip without a GPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import op_references as ref
import opgen_ops.jax as jops
import opgen_ops.torch as tops
from test_backward import jax_layer_norm as jax_reference

CPU = jax.devices("cpu")[0]
EPS = 1e-5


def tensors(rng, shapes, dtype=np.float32, device="cpu"):
    return [torch.from_numpy(rng.standard_normal(s).astype(dtype)).to(device) for s in shapes]


@pytest.mark.parametrize("given", ["x", "x, weight", "x, weight, bias"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_matches_native_layer_norm(rng, given, dtype):
    n = len(given.split(","))
    args = [t.to(getattr(torch, dtype)) for t in tensors(rng, [(3, 5, 96), (96,), (96,)][:n])]
    out, mean, rstd = tops.layer_norm(*args, eps=EPS, return_mean=True, return_rstd=True)
    want, want_mean, want_rstd = torch.native_layer_norm(
        args[0].float(), [96], *(a.float() for a in args[1:]), *([None] * (3 - n)), EPS)
    torch.testing.assert_close(out.float(), want, rtol=ref.TOLERANCE[dtype], atol=ref.TOLERANCE[dtype] * 4)
    assert mean.dtype == rstd.dtype == torch.float32 and mean.shape == rstd.shape == (3, 5)
    torch.testing.assert_close(mean, want_mean[..., 0], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(rstd, want_rstd[..., 0], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype, stats", [("float16", "float32"), ("bfloat16", "float32"), ("float32", "float32"),
                                          ("float64", "float64")])
def test_statistics_are_f32_or_f64_for_f64_in_both_frameworks(rng, dtype, stats):
    x = rng.standard_normal((3, 40)) * 3 + 1
    out, mean, rstd = tops.layer_norm(torch.from_numpy(x).to(getattr(torch, dtype)), return_mean=True, return_rstd=True)
    assert out.dtype == getattr(torch, dtype) and mean.dtype == rstd.dtype == getattr(torch, stats)
    with jax.enable_x64(dtype == "float64"):
        jout, jmean, jrstd = jops.layer_norm(jax.device_put(x.astype(jnp.dtype(dtype)), CPU), return_mean=True,
                                             return_rstd=True)
    assert jout.dtype == jnp.dtype(dtype) and jmean.dtype == jrstd.dtype == jnp.dtype(stats)
    if dtype == "float64":  # f64 statistics keep f64's digits
        np.testing.assert_allclose(mean.numpy(), x.mean(-1), rtol=1e-13)
        np.testing.assert_allclose(np.asarray(jrstd), 1 / np.sqrt(x.var(-1) + EPS), rtol=1e-13)


def test_jax_matches_its_own_layer_norm(rng):
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in [(4, 7, 64), (64,), (64,)])
    for api_version in (4, 3):
        out, mean, rstd = jax.jit(lambda *a: jops.layer_norm(*a, eps=EPS, api_version=api_version, return_mean=True,
                                                             return_rstd=True))(x, w, b)
        np.testing.assert_allclose(np.asarray(out), np.asarray(jax_reference(x, w, b)), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(mean), x.astype(np.float64).mean(-1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(rstd), 1 / np.sqrt(x.astype(np.float64).var(-1) + EPS), rtol=1e-5)


def test_statistics_not_asked_for_are_none_and_not_computed(rng):
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in [(5, 32), (32,), (32,)])
    out, mean, rstd = tops.layer_norm(*(torch.from_numpy(a) for a in (x, w, b)), eps=EPS)
    assert mean is None and rstd is None
    torch.testing.assert_close(out, torch.nn.functional.layer_norm(torch.from_numpy(x), [32], torch.from_numpy(w),
                                                                   torch.from_numpy(b), EPS))
    only_rstd = tops.layer_norm(torch.from_numpy(x), return_rstd=True)
    assert only_rstd[1] is None and only_rstd[2].shape == (5,)
    # JAX: the program holds no result for a statistic not asked for.
    hlo = jax.jit(lambda a: jops.layer_norm(a, eps=EPS)).lower(x).as_text()
    assert jops.layer_norm(x, eps=EPS)[1:] == (None, None)
    assert "tensor<5xf32>" not in hlo, hlo


def test_a_large_mean_does_not_cancel_the_variance(rng):
    # Rows of 1e4 + N(0, 1): E[x^2] - E[x]^2 in f32 would lose every digit of the variance.
    x = torch.from_numpy(1e4 + rng.standard_normal((4, 256)).astype(np.float32))
    out, _, rstd = tops.layer_norm(x, eps=EPS, return_rstd=True)
    want_rstd = 1 / np.sqrt(x.double().numpy().var(-1) + EPS)
    np.testing.assert_allclose(rstd.numpy(), want_rstd, rtol=1e-3)
    xd = x.double().numpy()
    np.testing.assert_allclose(out.numpy(), (xd - xd.mean(-1, keepdims=True)) * want_rstd[:, None], atol=2e-3)


def test_backward_adds_grad_residual(rng):
    g, x, w, r = tensors(rng, [(6, 48), (6, 48), (48,), (6, 48)])
    with_residual = tops.layer_norm_backward(g, x, w, grad_residual=r, eps=EPS)
    without = tops.layer_norm_backward(g, x, w, eps=EPS)
    torch.testing.assert_close(with_residual[0], without[0] + r)
    for a, b in zip(with_residual[1:], without[1:]):
        torch.testing.assert_close(a, b)


# --- GPU ------------------------------------------------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")


def relative_error(got, want):
    want = want.double()
    return ((got.cpu().double() - want).norm() / max(want.norm(), 1.0)).item()


# The forward keeps a row in registers at 1, 2, 4 or 8 vectors of 16 bytes a
# thread (in blocks of 32, 64, 128 or 256 threads) and reads it from memory
# otherwise (an odd D, rows wider than 8 vectors); the backward reads rows once
# at up to 4 vectors, twice otherwise.
WIDTHS = [("float64", 1000), ("float64", 4096), ("float32", 40), ("bfloat16", 512), ("float16", 1024), ("float32", 1024), ("float32", 2048),
          ("bfloat16", 4096), ("float16", 8192), ("bfloat16", 16384), ("float32", 16384), ("bfloat16", 1023)]


@needs_cuda
@pytest.mark.parametrize("dtype, d", WIDTHS)
def test_cuda_forward_matches_the_cpu_body(rng, dtype, d):
    x, w, b = (t.to(getattr(torch, dtype)) for t in tensors(rng, [(300, d), (d,), (d,)]))
    x = x + 3.0  # a mean away from 0
    on_cpu = tops.layer_norm(x, w, b, eps=EPS, return_mean=True, return_rstd=True)
    on_gpu = tops.layer_norm(x.cuda(), w.cuda(), b.cuda(), eps=EPS, return_mean=True, return_rstd=True)
    for name, a, want in zip(("out", "mean", "rstd"), on_gpu, on_cpu):
        assert relative_error(a, want) < ref.CROSS_DEVICE_TOLERANCE[dtype], name


@needs_cuda
@pytest.mark.parametrize("dtype, d", WIDTHS)
@pytest.mark.parametrize("broadcast", [False, True])
def test_cuda_backward_matches_the_cpu_body(rng, dtype, d, broadcast):
    rows = 300  # more than one row per slice of the column sums in some slices, none in others
    x, w = (t.to(getattr(torch, dtype)) for t in tensors(rng, [(rows, d), (d,)]))
    g = tensors(rng, [(1, d) if broadcast else (rows, d)])[0].to(x.dtype).expand(rows, d)
    on_cpu = tops.layer_norm_backward(g, x + 3.0, w, eps=EPS)
    on_gpu = tops.layer_norm_backward(g.cuda(), (x + 3.0).cuda(), w.cuda(), eps=EPS)
    for name, a, want in zip(("grad_x", "grad_weight", "grad_bias"), on_gpu, on_cpu):
        assert relative_error(a, want) < ref.CROSS_DEVICE_TOLERANCE[dtype], name


# The one-pass backward gives each block every 512th row (256 on GPUs without
# clusters): here each block takes about 512 rows, one after another. Each
# row's statistics are its own, moved by a different amount, so that a row
# paired with another's shows.
@needs_cuda
@pytest.mark.parametrize("given", ["", "mean", "rstd", "mean, rstd"])
def test_cuda_backward_over_many_rows_a_block_matches_the_cpu_body(rng, given):
    rows, d = 2 * 512 * 256 + 3, 64
    x, w, g = tensors(rng, [(rows, d), (d,), (rows, d)], dtype=np.float64)
    x = x + 3.0
    _, mean, rstd = tops.layer_norm(x, w, None, eps=EPS, return_mean=True, return_rstd=True)
    moved = {"mean": mean + torch.from_numpy(rng.uniform(0.1, 0.5, rows)),
             "rstd": rstd * torch.from_numpy(rng.uniform(1.5, 2.0, rows))}
    stats = {name: moved[name] for name in ("mean", "rstd") if name in given}
    on_cpu = tops.layer_norm_backward(g, x, w, eps=EPS, **stats)
    on_gpu = tops.layer_norm_backward(g.cuda(), x.cuda(), w.cuda(), eps=EPS,
                                      **{name: s.cuda() for name, s in stats.items()})
    for name, a, want in zip(("grad_x", "grad_weight", "grad_bias"), on_gpu, on_cpu):
        assert relative_error(a, want) < ref.CROSS_DEVICE_TOLERANCE["float64"], name


@needs_cuda
def test_cuda_graph_replays_forward_and_backward(rng):
    x, w, b, g = tensors(rng, [(64, 1024), (1024,), (1024,), (64, 1024)], device="cuda")
    tops.layer_norm(x, w, b)  # warm up outside the capture (allocations, attributes)
    tops.layer_norm_backward(g, x, w)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = tops.layer_norm(x, w, b)[0]
        grads = tops.layer_norm_backward(g, x, w)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.testing.assert_close(out, torch.nn.functional.layer_norm(x, [1024], w, b, EPS), rtol=1e-4, atol=1e-4)
    want = tops.layer_norm_backward(g, x, w)
    for a, b_ in zip(grads, want):
        torch.testing.assert_close(a, b_)
