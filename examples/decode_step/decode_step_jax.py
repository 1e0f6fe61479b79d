"""One decoder layer's decode step in JAX, written twice: with opgen_ops' generated
ops (rms_norm, rotary_embedding, paged_attention_decode, fused_add_rms_norm) and with
jax.numpy alone. Both run jitted on the same inputs; the script prints the larger
of their outputs' relative errors and the time per step of each, and exits non-zero
when they disagree. f32 on the CPU, bf16 on the GPU.

  PYTHONPATH=build/python python examples/decode_step/decode_step_jax.py [cpu|cuda]
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import opgen_ops.jax as ops
from decode_inputs import CPU, EPS, GPU, STEPS, make_inputs  # beside this file


def write_kv(key_cache, value_cache, k, v, block_tables, positions):
    """Stores each sequence's new key and value at row pos % BS of its block block_tables[s, pos // BS].
    Framework indexing in both versions: kv_cache_write's cache is [B, S, H], one
    contiguous run per sequence, with no block table."""
    s = positions.shape[0]
    _, bs, kvh, dh = key_cache.shape
    block = block_tables[jnp.arange(s), positions // bs]
    row = positions % bs
    return (key_cache.at[block, row].set(k.reshape(s, kvh, dh)),
            value_cache.at[block, row].set(v.reshape(s, kvh, dh)))


def step_opgen(w, x, key_cache, value_cache, block_tables, context_lens):
    """The decode step with the generated ops. Returns (normalised output, new residual, key cache, value cache)."""
    s, d = x.shape
    _, _, kvh, dh = key_cache.shape
    h, _rstd = ops.rms_norm(x, w["norm1"])
    q, k, v = jnp.split(h @ w["qkv"], [d, d + kvh * dh], axis=-1)
    # JAX has no views: the rotated query and key come back as new arrays.
    q, k = ops.rotary_embedding(context_lens, q, w["cos_sin"], k, head_size=dh, is_neox=True)
    key_cache, value_cache = write_kv(key_cache, value_cache, k, v, block_tables, context_lens)
    attn = ops.paged_attention_decode(q.reshape(s, -1, dh), key_cache, value_cache, block_tables, context_lens + 1,
                                      scale=dh**-0.5)
    out, residual = ops.fused_add_rms_norm(attn.reshape(s, d) @ w["o"], x, w["norm2"])
    return out, residual, key_cache, value_cache


def rms_norm_ref(x, weight):
    x32 = x.astype(jnp.float32)
    rstd = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + EPS)
    return (x32 * rstd * weight.astype(jnp.float32)).astype(x.dtype)


def rotary_ref(positions, x, cos_sin, dh):
    """NeoX rotary: dimension i of each head pairs with i + Dh/2."""
    cos, sin = jnp.split(cos_sin[positions].astype(jnp.float32)[:, None, :], 2, axis=-1)  # [N, 1, Dh/2]
    x1, x2 = jnp.split(x.reshape(x.shape[0], -1, dh).astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).reshape(x.shape).astype(x.dtype)


def attention_ref(q, key_cache, value_cache, block_tables, context_lens, scale):
    """Gathers each sequence's blocks in order and attends over its first context_lens[s] tokens."""
    s, h, dh = q.shape
    _, _, kvh, _ = key_cache.shape
    keys = key_cache[block_tables].reshape(s, -1, kvh, dh).astype(jnp.float32)  # [S, MB*BS, KVH, Dh]
    values = value_cache[block_tables].reshape(s, -1, kvh, dh).astype(jnp.float32)
    # Query head h reads kv head h // (H // KVH): group the query heads by their kv head.
    qg = q.reshape(s, kvh, h // kvh, dh).astype(jnp.float32)
    logits = jnp.einsum("skgd,stkd->skgt", qg, keys, precision="highest") * scale
    logits = jnp.where(jnp.arange(keys.shape[1]) < context_lens[:, None, None, None], logits, -jnp.inf)
    out = jnp.einsum("skgt,stkd->skgd", jax.nn.softmax(logits, axis=-1), values, precision="highest")
    return out.reshape(s, h, dh).astype(q.dtype)


def step_reference(w, x, key_cache, value_cache, block_tables, context_lens):
    """The same step with jax.numpy alone."""
    s, d = x.shape
    _, _, kvh, dh = key_cache.shape
    q, k, v = jnp.split(rms_norm_ref(x, w["norm1"]) @ w["qkv"], [d, d + kvh * dh], axis=-1)
    q = rotary_ref(context_lens, q, w["cos_sin"], dh)
    k = rotary_ref(context_lens, k, w["cos_sin"], dh)
    key_cache, value_cache = write_kv(key_cache, value_cache, k, v, block_tables, context_lens)
    attn = attention_ref(q.reshape(s, -1, dh), key_cache, value_cache, block_tables, context_lens + 1, dh**-0.5)
    residual = attn.reshape(s, d) @ w["o"] + x
    return rms_norm_ref(residual, w["norm2"]), residual, key_cache, value_cache


def run(step, weights, x, key_cache, value_cache, block_tables, context_lens):
    """The step's results on fresh caches, and its time per step in a decode loop that donates
    the caches (XLA updates them in place) and feeds them back."""
    f = jax.jit(step, donate_argnums=(2, 3))

    def fresh():  # copies to donate: the caller's caches stay valid
        return jnp.copy(key_cache), jnp.copy(value_cache)

    results = jax.block_until_ready(f(weights, x, *fresh(), block_tables, context_lens))  # compiles
    caches = fresh()
    start = time.perf_counter()
    for _ in range(STEPS):
        caches = f(weights, x, *caches, block_tables, context_lens)[2:]
    jax.block_until_ready(caches)
    return results, (time.perf_counter() - start) / STEPS


def max_relative_error(got, want):
    """max |got - want| / max |want| over each output, the largest of them."""
    def one(g, w):
        g, w = g.astype(jnp.float32), w.astype(jnp.float32)
        return float(jnp.max(jnp.abs(g - w)) / jnp.max(jnp.abs(w)))
    return max(one(g, w) for g, w in zip(got, want))


def main(device: str | None = None) -> int:
    """Runs both versions on `device` ('cpu' or 'cuda'; None: the GPU when JAX has one) and
    returns 0 when they agree."""
    if device is None:
        try:
            device = "cuda" if jax.devices("gpu") else "cpu"
        except RuntimeError:
            device = "cpu"
    dev = jax.devices(device)[0]
    z, dtype, tol = (CPU, jnp.float32, 1e-4) if device == "cpu" else (GPU, jnp.bfloat16, 2e-2)
    weights, x, key_cache, value_cache, block_tables, context_lens = make_inputs(np.random.default_rng(0), z)

    def put(a):
        return jax.device_put(a.astype(dtype) if a.dtype == np.float32 else a, dev)

    args = (jax.tree.map(put, weights), put(x), put(key_cache), put(value_cache), put(block_tables),
            put(context_lens))
    got, t_opgen = run(step_opgen, *args)
    want, t_ref = run(step_reference, *args)
    err = max_relative_error(got, want)
    ok = err < tol
    print(f"decode step jax   {device} {jnp.dtype(dtype).name:<8} S={z.S} H={z.H} KVH={z.KVH} Dh={z.Dh}: "
          f"max rel. error {err:.2e} (tolerance {tol:.0e}), opgen {t_opgen * 1e3:.3f} ms/step, "
          f"jnp {t_ref * 1e3:.3f} ms/step{'' if ok else '  MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
