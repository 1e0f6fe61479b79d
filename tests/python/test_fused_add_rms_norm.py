"""fused_add_rms_norm, vLLM's residual add and RMS norm in place: against a
float64 reference through JAX (both results returned) and PyTorch (both
tensors updated, x as a row view of a wider tensor without a copy), on the
CPU and, where there is one, the GPU (16-byte vectors and the element path)."""

import jax
import ml_dtypes
import numpy as np
import pytest
import torch

import op_references as ref
import opgen_ops.jax as jops
import opgen_ops.torch as tops
from conftest import gpu_devices

CPU = jax.devices("cpu")[0]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def problem(rng, dtype, rows=(3, 5), d=64):
    x, residual = (rng.standard_normal(rows + (d,)).astype(DTYPES[dtype]) for _ in range(2))
    weight = rng.uniform(0.5, 1.5, d).astype(DTYPES[dtype])
    return x, residual, weight


def check(got_x, got_residual, x, residual, weight, dtype, eps):
    want_x, want_residual = ref.fused_add_rms_norm(x, residual, weight, eps, DTYPES[dtype])
    assert ref.relative_error(np.asarray(got_residual, np.float64), want_residual) < ref.TOLERANCE[dtype]
    assert ref.relative_error(np.asarray(got_x, np.float64), want_x) < ref.TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_returns_the_normalised_sum_and_the_sum(rng, dtype, api_version):
    x, residual, weight = problem(rng, dtype)
    f = jax.jit(lambda *a: jops.fused_add_rms_norm(*a, eps=1e-5, api_version=api_version))
    got_x, got_residual = f(*(jax.device_put(a, CPU) for a in (x, residual, weight)))
    check(got_x, got_residual, x, residual, weight, dtype, 1e-5)


def check_torch_in_place(rng, dtype, device, d):
    x, residual, weight = problem(rng, dtype, rows=(7,), d=d)
    torch_dtype = getattr(torch, dtype)
    # x as the first d columns of a wider tensor: a row view, updated in place.
    wide = torch.randn(7, d + 24, dtype=torch_dtype, device=device)
    wide[:, :d] = torch.from_numpy(np.asarray(x, np.float32)).to(torch_dtype)
    before = wide.clone()
    view = wide[:, :d]
    res = torch.from_numpy(np.asarray(residual, np.float32)).to(torch_dtype).to(device)
    w = torch.from_numpy(np.asarray(weight, np.float32)).to(torch_dtype).to(device)
    x_in, res_in = view.float().cpu().clone().numpy(), res.float().cpu().clone().numpy()  # not views of the inputs
    out_x, out_residual = tops.fused_add_rms_norm(view, res, w, eps=1e-6)
    assert out_x.data_ptr() == view.data_ptr() and out_residual.data_ptr() == res.data_ptr()
    check(wide[:, :d].float().cpu(), res.float().cpu(), x_in, res_in, w.float().cpu().numpy(), dtype, 1e-6)
    torch.testing.assert_close(wide[:, d:], before[:, d:], rtol=0, atol=0)  # the other columns


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_torch_updates_both_tensors_in_place_through_a_view(rng, dtype):
    check_torch_in_place(rng, dtype, "cpu", 64)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("d", [4096, 1000, 36])  # 16-byte vectors; D not a multiple of the vector
def test_torch_cuda_updates_both_tensors_in_place_through_a_view(rng, dtype, d):
    check_torch_in_place(rng, dtype, "cuda", d)


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_jax_cuda_matches_the_reference(rng, dtype):
    x, residual, weight = problem(rng, dtype, rows=(2, 300), d=2048)
    f = jax.jit(lambda *a: jops.fused_add_rms_norm(*a, eps=1e-6))
    got_x, got_residual = f(*(jax.device_put(a, gpu_devices()[0]) for a in (x, residual, weight)))
    check(got_x, got_residual, x, residual, weight, dtype, 1e-6)


@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_donated_tensors_are_updated_without_a_copy(rng, api_version):
    x, residual, weight = problem(rng, "float32")
    f = jax.jit(lambda *a: jops.fused_add_rms_norm(*a, api_version=api_version), donate_argnums=(0, 1))
    args = [jax.device_put(a, CPU) for a in (x, residual, weight)]
    hlo = f.lower(*args).compile().as_text()
    assert "copy(" not in hlo and "copy-start" not in hlo, hlo
    got_x, got_residual = f(*args)
    assert args[0].is_deleted() and args[1].is_deleted()
    check(got_x, got_residual, x, residual, weight, "float32", 1e-6)


def test_torch_compile_fullgraph_updates_both_tensors(rng):
    x, residual, weight = problem(rng, "float32", rows=(6,))
    tx, tr, tw = (torch.from_numpy(a.copy()) for a in (x, residual, weight))
    f = torch.compile(lambda a, r, w: tops.fused_add_rms_norm(a, r, w)[0].sum(), fullgraph=True)
    total = f(tx, tr, tw)
    check(tx, tr, x, residual, weight, "float32", 1e-6)
    torch.testing.assert_close(total, tx.sum(), rtol=1e-5, atol=1e-5)
