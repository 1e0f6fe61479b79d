"""flip at a realistic size through JAX, against a float64 numpy reference (README.md)."""

import jax
import numpy as np

import opgen_ops.jax as ops
from example_tools import api_versions, relative, timed


def run(rng, where):
    batch, m, n = (64, 512, 512) if where == "cuda" else (8, 64, 64)
    x = rng.standard_normal((batch, m, n)).astype(np.float32)
    out_rows = []
    for v in api_versions("flip", where):
        out, elapsed = timed(jax.jit(lambda x, v=v: ops.flip(x, dims=(-2, -1), api_version=v)), jax.device_put(x))
        # A flip is exact: any difference is a wrong element.
        out_rows.append(("flip rows+cols f32", v, f"[{batch}, {m}, {n}]", relative(out, x[:, ::-1, ::-1]), elapsed, 1e-30))
    return out_rows
