"""simple_add at a realistic size through JAX, against a float64 numpy reference (README.md)."""

import time

import jax
import numpy as np

import opgen_ops.jax as ops
from example_tools import api_versions


def run(rng, where):
    n = (1 << 22) + 3 if where == "cuda" else (1 << 16) + 3  # odd: exercises the tail path
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    alpha = float(rng.uniform(-2, 2))
    ref = a.astype(np.float64) + alpha * b.astype(np.float64)
    rows = []
    for v in api_versions("simple_add", where):
        f = jax.jit(lambda a, b, v=v: ops.simple_add(a, b, alpha=alpha, api_version=v))
        da, db = jax.device_put(a), jax.device_put(b)
        f(da, db).block_until_ready()  # compile
        start = time.perf_counter()
        out = f(da, db)
        out.block_until_ready()
        elapsed = time.perf_counter() - start
        err = np.linalg.norm(np.asarray(out, np.float64) - ref) / np.linalg.norm(ref)
        rows.append(("simple_add", v, f"[{n}]", err, elapsed, 1e-6))
    return rows
