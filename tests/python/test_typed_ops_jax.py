"""rms_norm and glu through JAX on XLA:CPU: type variables (dtype dispatch in
the handlers), batch dimensions, shape expressions, attribute ranges, and
their errors at the wrapper and inside the handlers."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import opgen_ops.jax as ops
import op_references as ref

CPU = jax.devices("cpu")[0]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def random(rng, shape, dtype):
    return jax.device_put(rng.standard_normal(shape).astype(DTYPES[dtype]), CPU)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("shape", [(7,), (3, 64), (2, 3, 100), (0, 8)])
def test_rms_norm(rng, dtype, api_version, shape):
    x, w = random(rng, shape, dtype), random(rng, shape[-1:], dtype)
    eps = float(rng.uniform(1e-6, 1e-2))
    out, rstd = jax.jit(lambda x, w: ops.rms_norm(x, w, eps=eps, api_version=api_version))(x, w)
    assert out.dtype == jnp.dtype(dtype) and out.shape == shape
    assert rstd.dtype == jnp.float32 and rstd.shape == shape[:-1]
    want, want_rstd = ref.rms_norm(x, w, eps)
    if want.size:
        assert ref.relative_error(out, want) < ref.TOLERANCE[dtype]
        assert ref.relative_error(rstd, want_rstd) < 1e-5


@pytest.mark.parametrize("dtype", [*DTYPES, "float64"])
@pytest.mark.parametrize("api_version", [4, 3])
def test_glu(rng, dtype, api_version):
    if dtype == "float64" and not jax.config.jax_enable_x64:
        pytest.skip("float64 arrays need jax_enable_x64")
    x = random(rng, (2, 5, 12), dtype)
    out = jax.jit(lambda x: ops.glu(x, api_version=api_version))(x)
    assert out.shape == (2, 5, 6) and out.dtype == jnp.dtype(dtype)
    assert ref.relative_error(out, ref.glu(x)) < ref.TOLERANCE[dtype]


def test_glu_vmaps_by_broadcasting(rng):
    # vmap_method broadcast_all: the vmapped axis joins the '...' dimensions,
    # so there is one custom call, not a loop.
    x = random(rng, (4, 3, 10), "float32")
    f = jax.jit(jax.vmap(ops.glu))
    np.testing.assert_allclose(np.asarray(f(x)), ref.glu(x), rtol=1e-6, atol=1e-6)
    assert f.lower(x).as_text().count("stablehlo.custom_call @opgen_ops_glu_ffi") == 1


def test_glu_odd_width_is_refused():
    x = np.zeros((2, 9), np.float32)
    with pytest.raises(ValueError, match=r"glu: output 'out' is declared \[\.\.\., D/2\], but 9 is not divisible by 2"):
        ops.glu(x)


def test_glu_handler_checks_the_division_too():
    x = jax.device_put(np.ones((2, 9), np.float32), CPU)
    call = jax.ffi.ffi_call("opgen_ops_glu_ffi", jax.ShapeDtypeStruct((2, 4), jnp.float32))
    with pytest.raises(Exception, match="glu: output 'out' is declared .*but 9 is not divisible by 2"):
        call(x, activation="sigmoid").block_until_ready()


def test_glu_handler_refuses_an_unknown_enum_string():
    # Past the wrapper, the handler still checks the string attribute.
    x = jax.device_put(np.ones((2, 8), np.float32), CPU)
    call = jax.ffi.ffi_call("opgen_ops_glu_ffi", jax.ShapeDtypeStruct((2, 4), jnp.float32))
    with pytest.raises(Exception, match="glu: attribute 'activation' is 'tanh'; it must be one of sigmoid, gelu, silu"):
        call(x, activation="tanh").block_until_ready()


def test_type_variable_must_agree(rng):
    x = random(rng, (3, 8), "float32")
    w = random(rng, (8,), "float16")
    with pytest.raises(TypeError, match=r"rms_norm: input 'weight' has dtype float16, but its dtype T is float32 "
                                        r"\(bound by input 'x'\)"):
        ops.rms_norm(x, w)


def test_type_variable_set_is_enforced():
    x = np.ones((3, 8), np.int32)
    with pytest.raises(TypeError, match="rms_norm: input 'x' has dtype int32; T must be one of float16, bfloat16, float32"):
        ops.rms_norm(x, x[0])


def test_handler_enforces_the_type_variable(rng):
    x = jax.device_put(np.ones((3, 8), np.int32), CPU)
    call = jax.ffi.ffi_call("opgen_ops_rms_norm_ffi", (jax.ShapeDtypeStruct((3, 8), jnp.int32),
                                                        jax.ShapeDtypeStruct((3,), jnp.float32)))
    with pytest.raises(Exception, match="rms_norm: input 'x' has dtype i32; T must be one of f16, bf16, f32"):
        jax.block_until_ready(call(x, x[0], eps=np.float32(1e-6), present_=np.int64(1)))


def test_batch_dimensions_must_agree_in_the_handler(rng):
    x = random(rng, (3, 8), "float32")
    call = jax.ffi.ffi_call("opgen_ops_rms_norm_ffi", (jax.ShapeDtypeStruct((3, 8), jnp.float32),
                                                        jax.ShapeDtypeStruct((4,), jnp.float32)))
    with pytest.raises(Exception, match=r"rms_norm: output 'rstd' has shape \[4\]; the call's inputs make it \[3\] "
                                        r"\(the spec declares \[\.\.\.\]\)"):
        jax.block_until_ready(call(x, x[0], eps=np.float32(1e-6), present_=np.int64(1)))


def test_attribute_range(rng):
    x = random(rng, (3, 8), "float32")
    with pytest.raises(ValueError, match=r"attribute 'eps' = -0.5 must be > 0.0"):
        ops.rms_norm(x, x[0], eps=-0.5)
    call = jax.ffi.ffi_call("opgen_ops_rms_norm_ffi", (jax.ShapeDtypeStruct((3, 8), jnp.float32),
                                                        jax.ShapeDtypeStruct((3,), jnp.float32)))
    with pytest.raises(Exception, match=r"rms_norm: attribute 'eps' = -0.5 must be > 0.0"):
        jax.block_until_ready(call(x, x[0], eps=np.float32(-0.5), present_=np.int64(1)))


def test_legacy_calls_vmap_sequentially(rng):
    # A legacy descriptor fixes the batch count at trace time, so its calls
    # must not be batched by broadcasting (glu's typed-FFI calls are).
    x = random(rng, (4, 5, 8), "float32")
    f = jax.jit(jax.vmap(lambda x: ops.glu(x, api_version=3)))
    np.testing.assert_allclose(np.asarray(f(x)), ref.glu(x), rtol=1e-6, atol=1e-6)


def test_nan_attribute_is_refused_by_the_handler(rng):
    x = random(rng, (3, 8), "float32")
    call = jax.ffi.ffi_call("opgen_ops_rms_norm_ffi", (jax.ShapeDtypeStruct((3, 8), jnp.float32),
                                                        jax.ShapeDtypeStruct((3,), jnp.float32)))
    with pytest.raises(Exception, match=r"rms_norm: attribute 'eps' = nan is not finite"):
        jax.block_until_ready(call(x, x[0], eps=np.float32("nan"), present_=np.int64(1)))
