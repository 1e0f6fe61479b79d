"""glu at a realistic size through JAX, against a float64 numpy reference (README.md)."""

import jax
import numpy as np

import opgen_ops.jax as ops
from example_tools import api_versions, relative, timed


def run(rng, where):
    rows, d = (4096, 8192) if where == "cuda" else (64, 1024)
    x = rng.standard_normal((rows, d)).astype(np.float32)
    a, b = x[:, : d // 2].astype(np.float64), x[:, d // 2 :].astype(np.float64)
    gates = {"sigmoid": 1 / (1 + np.exp(-b)), "silu": b / (1 + np.exp(-b))}
    out_rows = []
    for activation, gate in gates.items():
        for v in api_versions("glu", where):
            f = jax.jit(lambda x, v=v, act=activation: ops.glu(x, activation=act, api_version=v))
            out, elapsed = timed(f, jax.device_put(x))
            out_rows.append((f"glu {activation} f32", v, f"[{rows}, {d}]", relative(out, a * gate), elapsed, 1e-6))
    return out_rows
