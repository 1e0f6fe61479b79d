"""rms_norm and glu on the GPU (skipped without one): the CUDA bodies of every
instantiation against the float64 reference and the CPU bodies, through JAX
(typed FFI and legacy) and PyTorch (eager and torch.compile)."""

import jax
import ml_dtypes
import numpy as np
import pytest
import torch

import opgen_ops.jax as jops
import opgen_ops.torch as tops
from opgen_ops import _opaque, _ops
import op_references as ref
from conftest import gpu_devices

DTYPES = {"float32": (np.float32, torch.float32), "float16": (np.float16, torch.float16),
          "bfloat16": (ml_dtypes.bfloat16, torch.bfloat16)}
SHAPES = [(1, 7), (4, 128), (3, 5, 4096), (2, 8192 + 3)]


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("shape", SHAPES)
def test_jax_rms_norm_and_glu_on_gpu(rng, dtype, api_version, shape):
    np_dtype = DTYPES[dtype][0]
    x = rng.standard_normal(shape).astype(np_dtype)
    w = rng.standard_normal(shape[-1:]).astype(np_dtype)
    gpu = gpu_devices()[0]
    out, rstd = jax.jit(lambda x, w: jops.rms_norm(x, w, eps=1e-5, api_version=api_version))(
        jax.device_put(x, gpu), jax.device_put(w, gpu))
    want, want_rstd = ref.rms_norm(x, w, 1e-5)
    assert ref.relative_error(out, want) < ref.TOLERANCE[dtype]
    assert ref.relative_error(rstd, want_rstd) < 1e-5
    if shape[-1] % 2 == 0:
        g = jax.jit(lambda x: jops.glu(x, api_version=api_version))(jax.device_put(x, gpu))
        assert ref.relative_error(g, ref.glu(x)) < ref.TOLERANCE[dtype]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_torch_cuda_matches_cpu_body(rng, dtype, shape):
    t_dtype = DTYPES[dtype][1]
    x = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(t_dtype)
    w = torch.from_numpy(rng.standard_normal(shape[-1:]).astype(np.float32)).to(t_dtype)
    out, rstd = tops.rms_norm(x.cuda(), w.cuda(), eps=1e-5)
    cpu_out, cpu_rstd = tops.rms_norm(x, w, eps=1e-5)
    want, want_rstd = ref.rms_norm(x.double().numpy(), w.double().numpy(), 1e-5)
    assert ref.relative_error(out.cpu().double().numpy(), want) < ref.TOLERANCE[dtype]
    assert ref.relative_error(out.cpu().double().numpy(), cpu_out.double().numpy()) < ref.TOLERANCE[dtype]
    assert ref.relative_error(rstd.cpu().numpy(), want_rstd) < 1e-5
    if shape[-1] % 2 == 0:
        g = tops.glu(x.cuda())
        torch.testing.assert_close(g.cpu(), tops.glu(x), rtol=2e-2, atol=2e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_torch_compile_on_cuda(rng, mode):
    torch._dynamo.reset()

    def f(x, w):
        out, rstd = tops.rms_norm(x, w)
        return tops.glu(out) * rstd[..., None]

    compiled = torch.compile(f, fullgraph=True, mode=mode)
    for _ in range(3):
        x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(256, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(compiled(x, w), f(x, w))


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("activation", ["sigmoid", "gelu", "silu"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_glu_activations_on_gpu(rng, activation, dtype, api_version):
    x = rng.standard_normal((3, 5, 1000)).astype(DTYPES[dtype][0])
    g = jax.jit(lambda x: jops.glu(x, activation=activation, api_version=api_version))(
        jax.device_put(x, gpu_devices()[0]))
    assert ref.relative_error(g, ref.glu(x, activation)) < ref.TOLERANCE[dtype]


FLIP_DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8", "bool", "float8_e4m3fn",
               "float8_e5m2", "int8"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("dtype", FLIP_DTYPES)
@pytest.mark.parametrize("dims", [[], [-1], [-2], [-2, -1]])
def test_torch_flip_on_cuda_matches_torch(rng, dtype, dims):
    x = torch.from_numpy(rng.standard_normal((3, 37, 129)) * 50).to(getattr(torch, dtype)).cuda()
    out = tops.flip(x, dims=dims)
    if x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):  # compared bit for bit
        out, x = out.view(torch.uint8), x.view(torch.uint8)
    assert torch.equal(out, torch.flip(x, dims))
    with pytest.raises(RuntimeError, match=r"flip: attribute 'dims' lists -1 twice"):
        torch.ops.opgen_ops.flip__lowered(x, dims=torch.tensor([-1, -1]))


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "bool", "bfloat16", "float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_flip_on_gpu(rng, dtype, api_version):
    x = (rng.standard_normal((2, 3, 65, 33)) * 50).astype(getattr(ml_dtypes, dtype, dtype))
    out = jax.jit(lambda x: jops.flip(x, dims=(-1, -2), api_version=api_version))(jax.device_put(x, gpu_devices()[0]))
    assert np.array_equal(np.asarray(out), np.flip(x, (-1, -2)))


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("weight, bias", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("api_version", [4, 3])
def test_rms_norm_optional_inputs_on_gpu(rng, weight, bias, api_version):
    x = rng.standard_normal((6, 1000)).astype(np.float32)
    w = rng.standard_normal(1000).astype(np.float32) if weight else None
    b = rng.standard_normal(1000).astype(np.float32) if bias else None
    gpu = gpu_devices()[0]
    put = lambda a: None if a is None else jax.device_put(a, gpu)
    out, _ = jax.jit(lambda x, w, b: jops.rms_norm(x, w, b, api_version=api_version))(put(x), put(w), put(b))
    assert ref.relative_error(out, ref.rms_norm(x, w, 1e-6, bias=b)[0]) < 1e-5
    if torch.cuda.is_available():
        cuda = lambda a: None if a is None else torch.from_numpy(a).cuda()
        t_out, _ = tops.rms_norm(cuda(x), cuda(w), cuda(b))
        assert ref.relative_error(t_out.cpu().numpy(), ref.rms_norm(x, w, 1e-6, bias=b)[0]) < 1e-5


def kv_case(rng, dtype, b=8, s=33, h=520):
    cache = rng.standard_normal((b, s, h)).astype(dtype)
    values = rng.standard_normal((b, h)).astype(dtype)
    pos = rng.integers(-2, s + 2, b).astype(np.int32)
    want = cache.copy()
    for i, p in enumerate(pos):
        if 0 <= p < s:
            want[i, p] = values[i]
    return cache, values, pos, want


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("donate", [False, True])
def test_jax_kv_cache_write_on_gpu(rng, api_version, donate):
    cache, values, pos, want = kv_case(rng, ml_dtypes.bfloat16)
    gpu = gpu_devices()[0]
    f = jax.jit(lambda c, v, p: jops.kv_cache_write(c, v, p, api_version=api_version),
                donate_argnums=(0,) if donate else ())
    c = jax.device_put(cache, gpu)
    out = f(c, jax.device_put(values, gpu), jax.device_put(pos, gpu))
    assert np.array_equal(np.asarray(out), want)
    assert c.is_deleted() == donate


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("target, api_version", [("opgen_ops_kv_cache_write_ffi", 4),
                                                 ("opgen_ops_kv_cache_write_legacy_v3", 3)])
def test_jax_kv_cache_write_copies_into_a_separate_output_on_gpu(rng, target, api_version):
    from opgen_ops import _opaque

    cache, values, pos, want = kv_case(rng, np.float32)
    kwargs = {} if api_version == 4 else dict(custom_call_api_version=3, legacy_backend_config=_opaque.encode(_ops.kv_cache_write.OP,
        dtype_T=_ops.flip.OP.opaque.codes["float32"], B=cache.shape[0], S=cache.shape[1], H=cache.shape[2]))
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(cache.shape, cache.dtype), **kwargs)
    gpu = gpu_devices()[0]
    out = jax.jit(call)(*(jax.device_put(a, gpu) for a in (cache, values, pos)))
    assert np.array_equal(np.asarray(out), want)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_kv_cache_write_in_place_on_cuda(rng, dtype):
    cache, values, pos, want = kv_case(rng, np.float32)
    to = lambda a: torch.from_numpy(a).to(getattr(torch, dtype)).cuda()
    tc = to(cache)
    ptr = tc.data_ptr()
    assert tops.kv_cache_write(tc, to(values), torch.from_numpy(pos).cuda()) is tc and tc.data_ptr() == ptr
    assert torch.equal(tc.cpu(), to(want).cpu())
    compiled = torch.compile(lambda c, v, p: tops.kv_cache_write(c, v, p).float().sum(), fullgraph=True)
    tc2 = to(cache)
    # The compiled sum may add in another order than eager: compare loosely;
    # the update itself must be exact.
    torch.testing.assert_close(compiled(tc2, to(values), torch.from_numpy(pos).cuda()), to(want).float().sum(),
                               rtol=1e-4, atol=1e-2)
    assert torch.equal(tc2.cpu(), to(want).cpu())
