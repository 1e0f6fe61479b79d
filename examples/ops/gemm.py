"""gemm at a realistic size through JAX, against a float64 numpy reference (README.md)."""

import jax
import numpy as np

import opgen_ops.jax as ops
from example_tools import api_versions, relative, timed


def run(rng, where):
    """a @ b in bf16 (cuBLASLt on the GPU, through the op's state)."""
    m, n, k = (2048, 2048, 2048) if where == "cuda" else (96, 80, 64)
    a = rng.standard_normal((m, k)).astype(jax.numpy.bfloat16)
    b = rng.standard_normal((k, n)).astype(jax.numpy.bfloat16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    out_rows = []
    for v in api_versions("gemm", where):
        out, elapsed = timed(jax.jit(lambda a, b, v=v: ops.gemm(a, b, api_version=v)), jax.device_put(a),
                             jax.device_put(b))
        out_rows.append(("gemm bf16", v, f"{m}x{n}x{k}", relative(out, ref), elapsed, 1.5e-2))
    return out_rows
