"""gemm (out = a @ b, f32 accumulation; cuBLASLt on CUDA through the op's
state): every dtype against a float64 numpy product and against the
frameworks' own matmul, through JAX (both api_versions, eager, jax.jit,
jax.vmap) and torch (eager, torch.compile); an empty inner dimension (zeros)
and empty outputs; a K that does not match refused; and the built modules
do not link libcublasLt (the CUDA body loads it when it makes its state), so
the package imports without it. GPU variants skip without a GPU: odd shapes
and pointers off cuBLASLt's 256-byte alignment, torch CUDA graphs and
torch.compile's reduce-overhead, XLA's command buffers (a fresh process,
where the first call, which makes the state, is inside the capture)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch

import op_references as ref
import opgen_ops
import opgen_ops.jax as jops
import opgen_ops.torch as tops
from conftest import gpu_devices
from torch_arrays import as_numpy, to_torch

CPU = jax.devices("cpu")[0]
NUMPY = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
DTYPES = list(NUMPY)
# (M, N, K): a dot product, an outer product, odd sizes, tall and wide.
SHAPES = [(1, 1, 1), (1, 7, 1), (5, 1, 9), (3, 17, 33), (64, 48, 40), (2, 130, 7)]
requires_torch_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
requires_jax_gpu = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


def operands(rng, m, n, k, dtype):
    a = rng.standard_normal((m, k)).astype(NUMPY[dtype])
    b = rng.standard_normal((k, n)).astype(NUMPY[dtype])
    return a, b


def reference(a, b):
    return np.asarray(a, np.float64) @ np.asarray(b, np.float64)


# --- CPU --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("shape", SHAPES)
def test_jax_against_float64(rng, dtype, api_version, shape):
    a, b = operands(rng, *shape, dtype)
    f = lambda a, b: jops.gemm(a, b, api_version=api_version)  # noqa: E731
    for g in (f, jax.jit(f)):
        out = g(jax.device_put(a, CPU), jax.device_put(b, CPU))
        assert out.dtype == a.dtype and out.shape == (shape[0], shape[1])
        assert ref.relative_error(out, reference(a, b)) < ref.TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_torch_against_float64(rng, dtype, shape):
    a, b = operands(rng, *shape, dtype)
    out = tops.gemm(to_torch(a), to_torch(b))
    assert out.dtype == getattr(torch, dtype) and tuple(out.shape) == (shape[0], shape[1])
    assert ref.relative_error(as_numpy(out), reference(a, b)) < ref.TOLERANCE[dtype]


def test_against_the_frameworks_matmul_in_float32(rng):
    a, b = operands(rng, 37, 29, 53, "float32")
    torch.testing.assert_close(tops.gemm(torch.from_numpy(a), torch.from_numpy(b)),
                               torch.matmul(torch.from_numpy(a), torch.from_numpy(b)), rtol=1e-5, atol=1e-5)
    aj, bj = jax.device_put(a, CPU), jax.device_put(b, CPU)
    np.testing.assert_allclose(np.asarray(jax.jit(jops.gemm)(aj, bj)),
                               np.asarray(jnp.matmul(aj, bj, precision=jax.lax.Precision.HIGHEST)),
                               rtol=1e-5, atol=1e-5)


def test_jax_vmap_maps_a_batch_of_products(rng):
    a = rng.standard_normal((4, 6, 5)).astype(np.float32)
    b = rng.standard_normal((4, 5, 3)).astype(np.float32)
    out = jax.jit(jax.vmap(jops.gemm))(jax.device_put(a, CPU), jax.device_put(b, CPU))
    assert ref.relative_error(out, np.einsum("bmk,bkn->bmn", a.astype(np.float64), b)) < ref.TOLERANCE["float32"]


def test_torch_compile(rng):
    a, b = operands(rng, 9, 11, 13, "float32")
    compiled = torch.compile(lambda a, b: tops.gemm(a, b) * 2.0, fullgraph=True)
    out = compiled(torch.from_numpy(a), torch.from_numpy(b))
    assert ref.relative_error(out.numpy(), 2.0 * reference(a, b)) < ref.TOLERANCE["float32"]


@pytest.mark.parametrize("shape", [(3, 4, 0), (0, 4, 5), (3, 0, 5), (0, 0, 0)])
def test_empty_dimensions(shape):
    m, n, k = shape
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    for v in (4, 3):
        out = jax.jit(lambda a, b, v=v: jops.gemm(a, b, api_version=v))(jax.device_put(a, CPU), jax.device_put(b, CPU))
        np.testing.assert_array_equal(np.asarray(out), np.zeros((m, n), np.float32))  # an empty sum is 0
    np.testing.assert_array_equal(tops.gemm(torch.from_numpy(a), torch.from_numpy(b)).numpy(), np.zeros((m, n)))


def test_a_mismatched_inner_dimension_is_refused():
    a, b = np.ones((3, 4), np.float32), np.ones((5, 2), np.float32)
    with pytest.raises(ValueError, match="gemm"):
        jops.gemm(a, b)
    with pytest.raises((ValueError, RuntimeError), match="gemm"):
        tops.gemm(torch.from_numpy(a), torch.from_numpy(b))


def test_the_modules_do_not_link_cublaslt():
    # The CUDA body loads libcublasLt when it makes its state
    # (opgen/shared_library.h): importing the package, and its CPU bodies,
    # must not need it.
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    package = Path(opgen_ops.__file__).parent
    modules = sorted(package.glob("_C*.so")) + sorted(package.glob("_torch_ops*.so"))
    assert modules, f"no built modules in {package}"
    for module in modules:
        dynamic = subprocess.run([readelf, "-d", str(module)], capture_output=True, text=True, check=True).stdout
        needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
        assert needed, dynamic
        assert not any("cublas" in line.lower() for line in needed), (module.name, needed)


# --- GPU --------------------------------------------------------------------------------------

GPU_SHAPES = SHAPES + [(256, 512, 128), (1000, 1000, 1000), (33, 4096, 17)]
GPU_TOLERANCE = {"float16": 2e-3, "bfloat16": 1.5e-2, "float32": 1e-5}


@requires_torch_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_torch_cuda_against_float64_and_torch_matmul(rng, dtype, shape):
    a, b = operands(rng, *shape, dtype)
    ta, tb = to_torch(a, "cuda"), to_torch(b, "cuda")
    out = tops.gemm(ta, tb)
    assert ref.relative_error(as_numpy(out), reference(a, b)) < GPU_TOLERANCE[dtype]
    want = torch.matmul(ta.double(), tb.double()).to(ta.dtype)  # torch's own product, rounded once
    assert ref.relative_error(as_numpy(out), as_numpy(want).astype(np.float64)) < GPU_TOLERANCE[dtype]


@requires_torch_cuda
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_torch_cuda_pointers_off_the_usual_alignment(rng, dtype):
    # Rows 1: of a dense [M + 1, K] tensor: a dense [M, K] view 2 K (4 K)
    # bytes in, off cuBLASLt's default 256-byte alignment for odd K.
    m, n, k = 70, 45, 33
    a_big, b_big = operands(rng, m + 1, n, k, dtype)[0], operands(rng, m, n, k + 1, dtype)[1]
    ta, tb = to_torch(a_big, "cuda")[1:], to_torch(b_big, "cuda")[1:]
    assert ta.is_contiguous() and ta.data_ptr() % 256 != 0
    out = tops.gemm(ta, tb)
    assert ref.relative_error(as_numpy(out), reference(a_big[1:], b_big[1:])) < GPU_TOLERANCE[dtype]


@requires_jax_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_jax_cuda_against_float64_and_jnp_matmul(rng, dtype, api_version, shape):
    a, b = operands(rng, *shape, dtype)
    aj, bj = jax.device_put(a, gpu_devices()[0]), jax.device_put(b, gpu_devices()[0])
    out = jax.jit(lambda a, b: jops.gemm(a, b, api_version=api_version))(aj, bj)
    assert ref.relative_error(out, reference(a, b)) < GPU_TOLERANCE[dtype]
    want = jnp.matmul(aj, bj, precision=jax.lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
    assert ref.relative_error(out, np.asarray(want, np.float64)) < GPU_TOLERANCE[dtype]


@requires_torch_cuda
def test_torch_cuda_graph_replays_with_new_inputs(rng):
    a, b = operands(rng, 128, 96, 64, "bfloat16")
    ta, tb = to_torch(a, "cuda"), to_torch(b, "cuda")
    tops.gemm(ta, tb)  # warm-up (the state and this shape's plan) outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = tops.gemm(ta, tb)
    a2, b2 = operands(rng, 128, 96, 64, "bfloat16")
    ta.copy_(to_torch(a2, "cuda"))
    tb.copy_(to_torch(b2, "cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert ref.relative_error(as_numpy(out), reference(a2, b2)) < GPU_TOLERANCE["bfloat16"]


@requires_torch_cuda
def test_torch_compile_reduce_overhead(rng):
    compiled = torch.compile(lambda a, b: tops.gemm(a, b) + 1.0, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # recorded, then replayed
        a, b = operands(rng, 64, 80, 48, "float16")
        out = compiled(to_torch(a, "cuda"), to_torch(b, "cuda"))
        assert ref.relative_error(as_numpy(out), reference(a, b) + 1.0) < GPU_TOLERANCE["float16"]


def fresh(code: str, env: dict) -> dict:
    """Runs `code` in a new Python, where the package's first call happens, and returns the JSON it prints last."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **env))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@requires_jax_gpu
def test_jax_command_buffer_with_the_first_call_inside():
    got = fresh("""
        import json, jax, jax.numpy as jnp, numpy as np
        import opgen_ops.jax as jops
        f = jax.jit(lambda a, b: jops.gemm(a * 2.0, b) + 1.0)
        rng = np.random.default_rng(0)
        errors = []
        for _ in range(3):
            a, b = (rng.standard_normal(s).astype(np.float32) for s in ((96, 64), (64, 80)))
            out = f(jax.device_put(a, jax.devices("gpu")[0]), jax.device_put(b, jax.devices("gpu")[0]))
            want = 2.0 * a.astype(np.float64) @ b + 1.0
            errors.append(float(np.linalg.norm(np.asarray(out) - want) / np.linalg.norm(want)))
        print(json.dumps(errors))
    """, {"XLA_FLAGS": "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"})
    assert all(e < 1e-5 for e in got), got


@requires_torch_cuda
def test_torch_first_call_inside_a_cuda_graph_capture():
    got = fresh("""
        import json, torch
        import opgen_ops.torch as tops
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(64, 32, device="cuda", generator=g)
        b = torch.randn(32, 48, device="cuda", generator=g)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = tops.gemm(a, b)
        graph.replay()
        torch.cuda.synchronize()
        want = a.double() @ b.double()
        print(json.dumps(float((out.double() - want).norm() / want.norm())))
    """, {})
    assert got < 1e-5
