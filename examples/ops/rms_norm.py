"""rms_norm at a realistic size through JAX, against a float64 numpy reference (README.md)."""

import jax
import numpy as np

import opgen_ops.jax as ops
from example_tools import api_versions, relative, timed


def run(rng, where):
    rows, d = (4096, 4096) if where == "cuda" else (64, 1024)
    rows_out = []
    for dtype, tol in ((np.float32, 1e-5), (jax.numpy.bfloat16, 1.5e-2), (np.float16, 2e-3)):
        x = rng.standard_normal((rows, d)).astype(dtype)
        w = rng.standard_normal(d).astype(dtype)
        ref = x.astype(np.float64) / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * w.astype(np.float64)
        for v in api_versions("rms_norm", where):
            f = jax.jit(lambda x, w, v=v: ops.rms_norm(x, w, api_version=v)[0])
            out, elapsed = timed(f, jax.device_put(x), jax.device_put(w))
            rows_out.append((f"rms_norm {np.dtype(dtype).name}", v, f"[{rows}, {d}]", relative(out, ref), elapsed, tol))
    return rows_out
