"""rms_norm and glu as PyTorch ops on CPU tensors: dtype dispatch, batch
dimensions, shape expressions, opcheck and torch.compile."""

import numpy as np
import pytest
import torch

import opgen_ops.torch as ops
import op_references as ref

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def random(rng, shape, dtype):
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(DTYPES.get(dtype, torch.float64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 64), (2, 3, 100), (0, 8)])
def test_rms_norm(rng, dtype, shape):
    x, w = random(rng, shape, dtype), random(rng, shape[-1:], dtype)
    out, rstd = ops.rms_norm(x, w, eps=1e-5)
    assert out.dtype == DTYPES[dtype] and out.shape == shape
    assert rstd.dtype == torch.float32 and rstd.shape == shape[:-1]
    want, want_rstd = ref.rms_norm(x.double().numpy(), w.double().numpy(), 1e-5)
    if want.size:
        assert ref.relative_error(out.double().numpy(), want) < ref.TOLERANCE[dtype]
        assert ref.relative_error(rstd.numpy(), want_rstd) < 1e-5


@pytest.mark.parametrize("dtype", [*DTYPES, "float64"])
def test_glu_matches_torch(rng, dtype):
    x = random(rng, (2, 5, 12), dtype)
    out = ops.glu(x)
    assert out.shape == (2, 5, 6) and out.dtype == x.dtype
    assert ref.relative_error(out.double().numpy(), ref.glu(x.double().numpy())) < ref.TOLERANCE.get(dtype, 1e-12)
    torch.testing.assert_close(out, torch.nn.functional.glu(x, -1), rtol=1e-2, atol=1e-2)


def test_opcheck(rng):
    x, w = random(rng, (4, 16), "float32"), random(rng, (16,), "float32")
    torch.library.opcheck(torch.ops.opgen_ops.rms_norm.default, (x, w), {"eps": 1e-4})
    torch.library.opcheck(torch.ops.opgen_ops.glu.default, (random(rng, (3, 2, 8), "bfloat16"),), {})


def test_compile_with_dynamic_batch(rng):
    torch._dynamo.reset()

    def f(x, w):
        out, rstd = ops.rms_norm(x, w)
        return ops.glu(out) * rstd[..., None]

    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    for shape in [(2, 16), (3, 5, 16)]:
        x, w = random(rng, shape, "float32"), random(rng, (16,), "float32")
        torch.testing.assert_close(compiled(x, w), f(x, w))


def test_compile_with_an_unbacked_batch_takes_the_dtypes_from_the_rules(rng):
    # An unbacked size has no hint for the C++ rules to check: the dtype rules alone run at trace time, and the
    # outputs' dtypes follow from the type variables they bind (a derived one, S; a dtype attribute's, Q).
    torch._dynamo.reset()

    def f(x):
        return ops.dynamic_per_token_scaled_fp8_quant(x, out_dtype=torch.float8_e5m2)

    x = random(rng, (5, 32), "bfloat16")
    torch._dynamo.decorators.mark_unbacked(x, 0)
    out, scale = torch.compile(f, fullgraph=True)(x)
    want_out, want_scale = f(x)
    assert (out.dtype, scale.dtype) == (torch.float8_e5m2, torch.float32) == (want_out.dtype, want_scale.dtype)
    torch.testing.assert_close(scale, want_scale)
    torch.testing.assert_close(out.float(), want_out.float())


def test_errors(rng):
    x = random(rng, (3, 8), "float32")
    with pytest.raises(RuntimeError, match=r"rms_norm: input 'weight' has dtype float16, but its dtype T is float32"):
        ops.rms_norm(x, x[0].half())
    with pytest.raises(RuntimeError, match=r"rms_norm: input 'x' has dtype int32; T must be one of float16, bfloat16, float32"):
        ops.rms_norm(x.int(), x[0].int())
    with pytest.raises(RuntimeError, match=r"glu: output 'out' is declared \[\.\.\., D/2\], but 7 is not divisible by 2"):
        ops.glu(x[:, :7].contiguous())
    with pytest.raises(RuntimeError, match=r"attribute 'eps' = -1.0 must be > 0.0"):
        ops.rms_norm(x, x[0], eps=-1.0)
    with pytest.raises(RuntimeError, match=r"input 'weight' has rank 2 \(shape \[3, 8\]\); the spec declares \[D\]"):
        ops.rms_norm(x, x)


def test_attributes_that_do_not_fit_are_refused(rng):
    x = random(rng, (3, 8), "float32")
    with pytest.raises(RuntimeError, match="attribute 'eps' = nan is not finite"):
        ops.rms_norm(x, x[0], eps=float("nan"))
    with pytest.raises(RuntimeError, match="attribute 'alpha' = .* does not fit f32"):
        torch.ops.opgen_ops.simple_add(x[0], x[0], alpha=1e40)
