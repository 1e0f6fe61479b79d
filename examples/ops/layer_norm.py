"""layer_norm at a realistic size through JAX, against a float64 numpy reference (README.md)."""

import jax
import numpy as np

import opgen_ops.jax as ops
from example_tools import api_versions, relative, timed


def run(rng, where):
    """bf16 activations with weight and bias, and the statistics asked for
    (f32 for bf16); the error is that of the output."""
    rows, d = (16384, 4096) if where == "cuda" else (64, 1024)
    x = (rng.standard_normal((rows, d)) + 2).astype(jax.numpy.bfloat16)
    w, b = (rng.standard_normal(d).astype(jax.numpy.bfloat16) for _ in range(2))
    x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
    centred = x64 - x64.mean(-1, keepdims=True)
    ref = centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + 1e-5) * w64 + b64
    out_rows = []
    for v in api_versions("layer_norm", where):
        f = jax.jit(lambda x, w, b, v=v: ops.layer_norm(x, w, b, return_mean=True, return_rstd=True, api_version=v))
        (out, mean, _), elapsed = timed(f, *(jax.device_put(a) for a in (x, w, b)))
        err = max(relative(out, ref), relative(mean, x64.mean(-1)))
        out_rows.append(("layer_norm bf16", v, f"[{rows}, {d}]", err, elapsed, 1.5e-2))
    return out_rows
