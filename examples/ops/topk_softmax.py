"""topk_softmax at a realistic size through JAX, against a float64 numpy reference (README.md)."""

import jax
import numpy as np

import opgen_ops.jax as ops
from example_tools import api_versions, relative, timed


def run(rng, where):
    """A MoE router's logits (tokens x experts) in bf16: each row a shuffle
    of distinct values, so that the top k have no ties to break. The error is
    that of the weights, infinite where an index differs."""
    n, e, k = (65536, 256, 8) if where == "cuda" else (256, 64, 8)
    x = (rng.permuted(np.tile(np.arange(e) - e // 2, (n, 1)), axis=1) / 16).astype(jax.numpy.bfloat16)
    x64 = x.astype(np.float64)
    p = np.exp(x64 - x64.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want_i = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    want_w = np.take_along_axis(p, want_i, -1)
    out_rows = []
    for v in api_versions("topk_softmax", where):
        (w, i), elapsed = timed(jax.jit(lambda x, v=v: ops.topk_softmax(x, topk=k, api_version=v)), jax.device_put(x))
        err = relative(w, want_w) if np.array_equal(np.asarray(i), want_i) else np.inf
        out_rows.append(("topk_softmax bf16", v, f"[{n}, {e}]", err, elapsed, 1e-5))
    return out_rows
