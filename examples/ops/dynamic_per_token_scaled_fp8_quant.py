"""dynamic_per_token_scaled_fp8_quant at a realistic size through JAX, against a float64 numpy reference (README.md)."""

import jax
import numpy as np

import opgen_ops.jax as ops
from example_tools import api_versions, relative, timed


def run(rng, where):
    """bf16 activations quantised per row to float8_e4m3fn; the error is that
    of out * scale against x (e4m3fn keeps 3 bits of mantissa)."""
    rows, d = (16384, 4096) if where == "cuda" else (64, 1024)
    x = rng.standard_normal((rows, d)).astype(jax.numpy.bfloat16)
    out_rows = []
    for v in api_versions("dynamic_per_token_scaled_fp8_quant", where):
        f = jax.jit(lambda x, v=v: ops.dynamic_per_token_scaled_fp8_quant(x, out_dtype="float8_e4m3fn", api_version=v))
        (q, scale), elapsed = timed(f, jax.device_put(x))
        back = np.asarray(q).astype(np.float64) * np.asarray(scale, np.float64)[:, None]
        out_rows.append(("fp8 quant bf16>e4m3", v, f"[{rows}, {d}]", relative(back, x.astype(np.float64)), elapsed,
                         6.5e-2))
    return out_rows
