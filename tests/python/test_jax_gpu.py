"""simple_add through JAX on XLA:GPU (skipped where JAX sees no GPU): every
api_version against a float64 reference and against the CPU body, errors,
and the op inside larger jitted programs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import opgen_ops
import opgen_ops.jax as ops
from conftest import gpu_devices, requires_gpu

pytestmark = requires_gpu

GPU_VERSIONS = (4, 3, 2, 1)


def gpu():
    return gpu_devices()[0]


def reference(a, b, alpha):
    return a.astype(np.float64) + alpha * b.astype(np.float64)


def test_package_was_built_with_cuda():
    assert opgen_ops.built_with_cuda


@pytest.mark.parametrize("api_version", GPU_VERSIONS)
@pytest.mark.parametrize("n", [1, 3, 4, 1023, 1 << 20, (1 << 22) + 5])
def test_matches_float64_reference(rng, api_version, n):
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    alpha = float(rng.uniform(-3, 3))
    f = jax.jit(lambda a, b: ops.simple_add(a, b, alpha=alpha, api_version=api_version))
    out = f(jax.device_put(a, gpu()), jax.device_put(b, gpu()))
    assert out.devices() == {gpu()}
    np.testing.assert_allclose(np.asarray(out), reference(a, b, alpha), rtol=1e-6, atol=1e-6)


def test_cuda_body_agrees_with_cpu_body(rng):
    n = (1 << 18) + 7
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    f = jax.jit(lambda a, b: ops.simple_add(a, b, alpha=0.37))
    on_gpu = np.asarray(f(jax.device_put(a, gpu()), jax.device_put(b, gpu())))
    on_cpu = np.asarray(f(jax.device_put(a, jax.devices("cpu")[0]), jax.device_put(b, jax.devices("cpu")[0])))
    # The same float32 expression; the GPU may contract it into an FMA, which
    # differs from the CPU by an ulp of alpha * b where a + alpha * b cancels.
    np.testing.assert_allclose(on_gpu, on_cpu, rtol=1e-6, atol=1e-6)


def test_chained_calls_in_one_program(rng):
    # Many dependent calls in one executable: XLA may capture them into a
    # command buffer (the FFI handler declares kCmdBufferCompatible).
    n = 4099
    x0 = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)

    def chain(x, b):
        for _ in range(25):
            x = ops.simple_add(x, b, alpha=0.5)
        return x

    out = np.asarray(jax.jit(chain)(jax.device_put(x0, gpu()), jax.device_put(b, gpu())))
    ref = x0.astype(np.float64) + 25 * 0.5 * b.astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_mixed_with_xla_ops_and_vmap(rng):
    a = rng.standard_normal((3, 64)).astype(np.float32)
    b = rng.standard_normal((3, 64)).astype(np.float32)
    f = jax.jit(jax.vmap(lambda x, y: jnp.sin(ops.simple_add(x, y, alpha=2.0))))
    out = np.asarray(f(jax.device_put(a, gpu()), jax.device_put(b, gpu())))
    np.testing.assert_allclose(out, np.sin(reference(a, b, 2.0)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("api_version", GPU_VERSIONS)
def test_empty_input(api_version):
    a = jax.device_put(np.zeros((0,), np.float32), gpu())
    out = jax.jit(lambda a: ops.simple_add(a, a, api_version=api_version))(a)
    assert out.shape == (0,)


def test_handler_rejects_mismatched_shapes_on_gpu(rng):
    a = jax.device_put(rng.standard_normal(8).astype(np.float32), gpu())
    b = jax.device_put(rng.standard_normal(5).astype(np.float32), gpu())
    call = jax.ffi.ffi_call("opgen_ops_simple_add_ffi", jax.ShapeDtypeStruct((8,), jnp.float32))
    with pytest.raises(Exception, match=r"simple_add: input 'b' has shape \[5\]; dimension 0 must be 8"):
        call(a, b, alpha=np.float32(1)).block_until_ready()


@pytest.mark.parametrize("api_version", (3, 2, 1))
def test_legacy_shim_refuses_a_short_descriptor_on_gpu(rng, capfd, api_version):
    a = jax.device_put(rng.standard_normal(8).astype(np.float32), gpu())
    call = jax.ffi.ffi_call(
        f"opgen_ops_simple_add_legacy_v{api_version}",
        jax.ShapeDtypeStruct((8,), jnp.float32),
        custom_call_api_version=api_version,
        legacy_backend_config=b"OPGN\x01\x00",
    )
    try:
        call(a, a).block_until_ready()
    except Exception as e:
        assert "shorter than its 16-byte header" in str(e)
        return
    err = capfd.readouterr().err
    assert f"opgen_ops_simple_add_legacy_v{api_version}: simple_add: opaque descriptor is 6 bytes" in err
    assert "the kernel was not run" in err
