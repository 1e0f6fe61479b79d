"""64-bit numpy inputs to the JAX wrappers without jax_enable_x64. JAX converts
a function's numpy arguments at its boundary (jit's, jnp.asarray) as it does
for every function: float64 becomes float32 and int64 int32. The wrappers
check the dtypes JAX hands the custom call, so an eager call, a jitted one and
a numpy constant inside a traced call meet the same checks and give the same
results; opgen itself casts nothing (with x64 on, a float64 input stays
float64 and is refused where the spec has no f64: test_jax_cpu.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import op_references as ref
import opgen_ops.jax as ops

TOL = ref.TOLERANCE["float32"]


@pytest.fixture(autouse=True)
def without_x64():
    with jax.enable_x64(False):
        yield


def eager_and_jitted(f, *args):
    """f(*args) eagerly and under jax.jit, which must agree exactly."""
    eager, jitted = f(*args), jax.jit(f)(*args)
    for e, j in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted)):
        assert e.dtype == j.dtype and e.shape == j.shape
        np.testing.assert_array_equal(np.asarray(e.astype(jnp.float32)), np.asarray(j.astype(jnp.float32)))
    return eager


def test_float64_arrays_are_float32_eager_as_under_jit(rng):
    """simple_add takes f32 alone: eagerly it refused the float64 arrays that
    jit takes, converted."""
    a, b = rng.standard_normal(17), rng.standard_normal(17)
    alpha = float(rng.uniform(-3, 3))
    out = eager_and_jitted(lambda a, b: ops.simple_add(a, b, alpha=alpha), a, b)
    assert out.dtype == jnp.float32
    want = a.astype(np.float32).astype(np.float64) + alpha * b.astype(np.float32).astype(np.float64)
    assert ref.relative_error(out, want) < TOL


def test_a_derived_dtype_follows_the_converted_input(rng):
    """The fp8 quant's scale dtype S follows T (f32, f64 for f64): checked as
    float64, the eager call refused the float32 scale_ub that jit takes (and
    the custom call then returned a float32 scale)."""
    x = rng.standard_normal((4, 32)) * np.exp2(rng.uniform(-2, 2, (4, 1)))
    ub = np.float32(rng.uniform(0.5, 1.5))
    out, scale = eager_and_jitted(lambda x, u: ops.dynamic_per_token_scaled_fp8_quant(x, u), x, ub)
    assert out.dtype == jnp.float8_e4m3fn and scale.dtype == jnp.float32
    want, want_scale = ref.dynamic_per_token_scaled_fp8_quant(x.astype(np.float32), "float8_e4m3fn", ub)
    np.testing.assert_allclose(np.asarray(scale, np.float64), want_scale, rtol=2e-7, atol=0)
    got = np.asarray(out.astype(jnp.float32), np.float64)
    assert np.all(np.abs(got - want) <= ref.fp8_ulp(want, "float8_e4m3fn"))


def test_int64_indices_are_int32_eager_as_under_jit(rng):
    """kv_cache_write's positions are i32 alone: eagerly it refused the int64
    array that jit takes, converted."""
    batch, seq, width = 3, 5, 4
    cache = rng.standard_normal((batch, seq, width)).astype(np.float32)
    values = rng.standard_normal((batch, width)).astype(np.float32)
    pos = rng.integers(0, seq, batch)  # int64
    assert pos.dtype == np.int64
    out = eager_and_jitted(ops.kv_cache_write, cache, values, pos)
    want = cache.copy()
    want[np.arange(batch), pos] = values
    np.testing.assert_array_equal(np.asarray(out), want)


def test_a_float64_numpy_constant_in_a_traced_call_is_float32(rng):
    """A numpy weight closed over by a jitted function is an operand JAX
    converts like an argument: it was refused as float64 beside the traced
    float32 input."""
    x = rng.standard_normal((3, 16)).astype(np.float32)
    weight = rng.standard_normal(16)  # float64
    out, rstd = jax.jit(lambda x: ops.rms_norm(x, weight))(x)
    want, want_rstd = ref.rms_norm(x, weight.astype(np.float32), 1e-6)
    assert out.dtype == jnp.float32
    assert ref.relative_error(out, want) < TOL and ref.relative_error(rstd, want_rstd) < TOL
