"""merge_attn_states at a realistic size through JAX, against a float64 numpy reference (README.md)."""

import jax
import numpy as np

import opgen_ops.jax as ops
from example_tools import api_versions, relative, timed


def run(rng, where):
    """Two partial attention results of bf16 heads (a chunked prefill's
    cached prefix and new suffix) merged by their lse, output_lse asked for;
    the error is the larger of the output's and the lse's."""
    n, h, d = (16384, 32, 128) if where == "cuda" else (256, 8, 128)
    po, so = (rng.standard_normal((n, h, d)).astype(jax.numpy.bfloat16) for _ in range(2))
    pl, sl = ((3 * rng.standard_normal((h, n))).astype(np.float32) for _ in range(2))
    m = np.maximum(pl, sl).astype(np.float64)
    a, b = np.exp(pl - m), np.exp(sl - m)
    ref = ((a / (a + b)).T[..., None] * po.astype(np.float64) + (b / (a + b)).T[..., None] * so.astype(np.float64))
    ref_lse = np.log(a + b) + m
    out_rows = []
    for v in api_versions("merge_attn_states", where):
        f = jax.jit(lambda *x, v=v: ops.merge_attn_states(*x, return_output_lse=True, api_version=v))
        (out, lse), elapsed = timed(f, *(jax.device_put(x) for x in (po, pl, so, sl)))
        out_rows.append(("merge_attn_states bf16", v, f"[{n}, {h}, {d}]", max(relative(out, ref),
                                                                              relative(lse, ref_lse)), elapsed, 1.5e-2))
    return out_rows
