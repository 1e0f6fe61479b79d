"""kv_cache_write at a realistic size through JAX, against a float64 numpy reference (README.md)."""

import time

import jax
import numpy as np

import opgen_ops.jax as ops
from example_tools import api_versions, relative


def run(rng, where):
    b, s, h = (32, 1024, 1024) if where == "cuda" else (8, 64, 256)
    cache = rng.standard_normal((b, s, h)).astype(np.float32)
    values = rng.standard_normal((b, h)).astype(np.float32)
    pos = rng.integers(0, s, b).astype(np.int32)
    want = cache.copy()
    want[np.arange(b), pos] = values
    out_rows = []
    for v in api_versions("kv_cache_write", where):
        # The cache is donated: XLA updates it in place, with no copy.
        f = jax.jit(lambda c, x, p, v=v: ops.kv_cache_write(c, x, p, api_version=v), donate_argnums=0)
        x, p = jax.device_put(values), jax.device_put(pos)
        f(jax.device_put(cache), x, p)  # compile
        c = jax.block_until_ready(jax.device_put(cache))
        start = time.perf_counter()
        out = jax.block_until_ready(f(c, x, p))
        elapsed = time.perf_counter() - start
        out_rows.append(("kv_cache_write f32", v, f"[{b}, {s}, {h}]", relative(out, want), elapsed, 1e-30))
    return out_rows
