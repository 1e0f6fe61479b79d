"""softmax at a realistic size through JAX, against a float64 numpy reference (README.md)."""

import jax
import numpy as np

import opgen_ops.jax as ops
from example_tools import api_versions, relative, timed


def run(rng, where):
    rows, d = (4096, 8192) if where == "cuda" else (64, 1024)
    out_rows = []
    for dtype, tol in ((np.float32, 1e-5), (jax.numpy.bfloat16, 1.5e-2)):
        x = (rng.standard_normal((rows, d)) * 3).astype(dtype)
        x64 = x.astype(np.float64)
        e = np.exp(x64 - x64.max(-1, keepdims=True))
        ref = e / e.sum(-1, keepdims=True)
        for v in api_versions("softmax", where):
            out, elapsed = timed(jax.jit(lambda x, v=v: ops.softmax(x, api_version=v)), jax.device_put(x))
            out_rows.append((f"softmax {np.dtype(dtype).name}", v, f"[{rows}, {d}]", relative(out, ref), elapsed, tol))
    return out_rows
