"""What both greedy decoders (llama_torch.py, llama_jax.py) share: the model's sizes
on the CPU and the GPU, its weights, and the state decoding starts from (random
caches standing for an already-processed context, block tables, context lengths,
a first token per sequence), all as seeded numpy arrays, so that the two frameworks
decode the same problem; the weights' layout for tensor parallelism; and the checks of
a decode against the reference and against one device, and the timing line, that
both print."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import ml_dtypes
import numpy as np

EPS = 1e-6  # rms_norm's and fused_add_rms_norm's default
ROPE_THETA = 10000.0


class Config(NamedTuple):
    L: int  # decoder layers
    d: int  # hidden size (= H * Dh, as in Llama)
    H: int  # query heads
    KVH: int  # key/value heads (grouped-query attention: H // KVH query heads share one)
    Dh: int  # head size
    F: int  # MLP width (SwiGLU: up and gate projections are F wide each)
    V: int  # vocabulary
    BS: int  # tokens per cache block
    NB: int  # blocks in each layer's caches
    MB: int  # blocks per sequence (the block table's width): MB * BS tokens at most
    S: int  # sequences decoded together (the batch)
    T: int  # greedy decode steps
    min_context: int  # tokens already cached per sequence: drawn from [min_context, MB*BS - T]
    tol: float  # f32 check: max |logits - reference| / max |reference|
    fp8_tol: float  # the fp8 cache against the f32 cache: max |logits - f32 cache's| / max |f32 cache's| (README.md)


# Tiny, so that both frameworks check and time it in a few seconds on two CPU cores; 4 kv heads, so that
# it splits over the 4 host devices of tests/multi_device (tensor parallelism cuts whole kv heads).
CPU = Config(L=2, d=512, H=8, KVH=4, Dh=64, F=512, V=512, BS=16, NB=40, MB=8, S=4, T=4, min_context=16, tol=1e-4,
             fp8_tol=3e-2)
# Llama-3-8B's layer shapes, 8 layers and a 32000-token vocabulary: 2.0 G parameters (3.7 GiB in bf16,
# 7.5 GiB in f32 for the check), caches of 1024 tokens per sequence (1 GiB in bf16 for the 8 layers).
GPU = Config(L=8, d=4096, H=32, KVH=8, Dh=128, F=14336, V=32000, BS=16, NB=2048, MB=64, S=32, T=16,
             min_context=256, tol=1e-3, fp8_tol=2e-2)


def _normals(seed, specs):
    """Seeded standard normals, one array per (shape, scale) in `specs`, each times its scale, drawn on
    several threads (numpy releases the GIL while it fills an array): the GPU model's 2.5 G numbers
    take tens of seconds on one."""
    def one(args):
        seed, (shape, scale) = args
        a = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
        a *= np.float32(scale)
        return a

    with ThreadPoolExecutor() as pool:
        return list(pool.map(one, zip(np.random.SeedSequence(seed).spawn(len(specs)), specs)))


@functools.lru_cache(maxsize=2)  # run_examples.py calls both frameworks: make the numbers once
def make_model(c: Config, seed: int = 0):
    """The weights and the decode's starting state, float32 and int32 numpy arrays:

    weights: embed [V, d]; layers, a list of L dicts of norm1 [d], qkv [d, d + 2*KVH*Dh] (Wq | Wk | Wv),
      o [d, d], norm2 [d], up_gate [d, 2F] (W_up | W_gate: glu multiplies the first half by silu of the
      second), down [F, d]; norm [d]; lm_head [d, V]; cos_sin [MB*BS, Dh] (NeoX: Dh/2 cosines, then sines).
    state: key_caches and value_caches, lists of L [NB, BS, KVH, Dh] (random: the context's keys and
      values); block_tables [S, MB] i32 (distinct blocks, scattered); context_lens [S] i32; tokens [S] i32.
    Treat them as read-only: the cache is shared by every call with the same arguments."""
    rng = np.random.default_rng(seed)
    kvd = c.KVH * c.Dh
    # The big arrays, by (layer or "top", name): (shape, scale). Projections are scaled by 1/sqrt(fan-in),
    # which keeps the activations of order 1 through the layers.
    cache = ((c.NB, c.BS, c.KVH, c.Dh), 1.0)
    specs = {("top", "embed"): ((c.V, c.d), 1.0), ("top", "lm_head"): ((c.d, c.V), c.d ** -0.5)}
    for layer in range(c.L):
        specs.update({(layer, "qkv"): ((c.d, c.d + 2 * kvd), c.d ** -0.5), (layer, "o"): ((c.d, c.d), c.d ** -0.5),
                      (layer, "up_gate"): ((c.d, 2 * c.F), c.d ** -0.5), (layer, "down"): ((c.F, c.d), c.F ** -0.5),
                      (layer, "key"): cache, (layer, "value"): cache})
    arrays = dict(zip(specs, _normals(seed, list(specs.values()))))

    def norm_weight():
        return (1 + 0.1 * rng.standard_normal(c.d)).astype(np.float32)

    angles = np.arange(c.MB * c.BS)[:, None] * ROPE_THETA ** (-np.arange(0, c.Dh, 2) / c.Dh)
    weights = {
        "embed": arrays["top", "embed"],
        "layers": [{"norm1": norm_weight(), "qkv": arrays[layer, "qkv"], "o": arrays[layer, "o"],
                    "norm2": norm_weight(), "up_gate": arrays[layer, "up_gate"], "down": arrays[layer, "down"]}
                   for layer in range(c.L)],
        "norm": norm_weight(),
        "lm_head": arrays["top", "lm_head"],
        "cos_sin": np.concatenate([np.cos(angles), np.sin(angles)], -1).astype(np.float32),
    }
    state = {
        "key_caches": [arrays[layer, "key"] for layer in range(c.L)],
        "value_caches": [arrays[layer, "value"] for layer in range(c.L)],
        # Every sequence owns MB distinct blocks, scattered over the caches.
        "block_tables": rng.permutation(c.NB)[: c.S * c.MB].reshape(c.S, c.MB).astype(np.int32),
        # The new token goes at position context_lens[s]; T steps must fit in the sequence's MB*BS slots.
        "context_lens": rng.integers(c.min_context, c.MB * c.BS - c.T + 1, c.S).astype(np.int32),
        "tokens": rng.integers(0, c.V, c.S).astype(np.int32),
    }
    return weights, state


# The caches' dtypes the decoders offer (--kv-cache-dtype), by the name the ops give them (kv_cache_dtype, as
# vLLM's): auto, the model's own; fp8, float8_e4m3fn (vLLM's fp8 cache, its scales from amax / 448).
KV_CACHE_DTYPES = {"auto": None, "fp8": "float8_e4m3fn"}
# The state's per-layer cache scales (0-d float32 arrays, lists of L): float32 whatever the model's dtype, as
# the ops take them.
SCALES = ("k_scales", "v_scales")


def layer_scales(st):
    """Each layer's (k_scale, v_scale) in a decode state: its SCALES, or (None, None) where its caches are of
    the model's dtype (no scales)."""
    return zip(*(st.get(name, [None] * len(st["key_caches"])) for name in SCALES))


def kv_cache_dtype_of(cache_dtype: str) -> str:
    """The ops' kv_cache_dtype for a cache of this dtype (its name: 'float8_e4m3fn' in numpy, JAX and torch
    alike): the step passes what its caches are."""
    return next((name for name, dtype in KV_CACHE_DTYPES.items() if dtype == cache_dtype), "auto")


def quantized(x, scale, dtype):
    """What reshape_and_cache writes for x (float32) into a cache of `dtype` (an ml_dtypes 8-bit float) with
    this scale, in numpy: x / scale in float32, rounded to the nearest value of dtype (ties to even: ml_dtypes'
    cast) and saturated to its finite range (the cast alone would give NaN past it)."""
    largest = np.float32(ml_dtypes.finfo(dtype).max)
    return np.clip(x / np.float32(scale), -largest, largest).astype(dtype)


@functools.lru_cache(maxsize=2)
def quantized_state(c: Config, seed: int = 0, cache_dtype: str = "float8_e4m3fn"):
    """make_model's starting state with caches of `cache_dtype` (an 8-bit float's name, KV_CACHE_DTYPES's)
    that hold the same context as vLLM's fp8 caches do: each layer's keys divided by its k_scale and
    rounded (quantized()), likewise the values, the scales chosen from the data as vLLM calibrates them,
    max |x| / (the dtype's largest value: 448 in e4m3), so that the largest key maps to the largest fp8
    value. Adds k_scales and v_scales (SCALES); the rest is make_model's (shared: treat it as read-only)."""
    _, state = make_model(c, seed)
    dtype = np.dtype(getattr(ml_dtypes, cache_dtype))
    out = dict(state)
    for caches, scales in (("key_caches", "k_scales"), ("value_caches", "v_scales")):
        out[scales] = [np.asarray(np.abs(cache).max() / ml_dtypes.finfo(dtype).max, np.float32)
                       for cache in state[caches]]
        out[caches] = [quantized(cache, scale, dtype) for cache, scale in zip(state[caches], out[scales])]
    return out


def by_shard(weights, c: Config, shards: int):
    """The weights with the columns of the packed projections laid out for `shards` devices, each of
    which holds one contiguous block of columns (column-parallel): block i of qkv is device i's query
    heads, then its kv heads' keys, then their values (Wq_i | Wk_i | Wv_i), and block i of up_gate is
    W_up_i | W_gate_i, so that each device projects, rotates, caches and attends its own heads, and
    gates its own part of the MLP, alone. One shard is make_model's layout. A new dict; the arrays
    that do not change are shared."""
    def blocks(w, widths):
        parts = [np.split(p, shards, axis=-1) for p in np.split(w, np.cumsum(widths)[:-1], axis=-1)]
        return np.concatenate([part[i] for i in range(shards) for part in parts], axis=-1)

    kvd = c.KVH * c.Dh
    layers = [{**lw, "qkv": blocks(lw["qkv"], [c.d, kvd, kvd]), "up_gate": blocks(lw["up_gate"], [c.F, c.F])}
              for lw in weights["layers"]]
    return {**weights, "layers": layers}


def check(name, device, tokens, logits, ref_logits, tol, against="reference"):
    """Compares a decode's tokens [T, S] and logits [T, S, V] (numpy, float32) with the reference's
    logits, computed from the same input tokens (teacher-forced). Every token must be the reference's
    argmax, unless the reference's logit for it is within the tolerance of its maximum (a near-tie, which
    a rounding may flip). `against` names the reference in the line. Prints one line; returns whether both
    hold."""
    scale = np.abs(ref_logits).max()
    err = np.abs(logits - ref_logits).max() / scale
    ref_best = ref_logits.max(-1)
    chosen = np.take_along_axis(ref_logits, tokens[..., None], -1)[..., 0]
    equal = tokens == ref_logits.argmax(-1)
    ties = ~equal & (ref_best - chosen <= tol * scale)
    ok = err <= tol and bool(np.all(equal | ties))
    print(f"  {name:<28} {device} f32: logits max rel. error {err:.2e} (tolerance {tol:.0e}), "
          f"tokens {int(equal.sum())}/{equal.size} = {against} argmax, {int(ties.sum())} near-ties"
          f"{'' if ok else '  MISMATCH'}")
    return ok


def check_same(name, device, tokens, logits, one_tokens, one_logits, tol):
    """Compares a decode split over devices (tokens [T, S], logits [T, S, V]) with the one-device
    decoder's from the same start: in f32 the tokens must be the same (the split only reorders the
    sums of the row-parallel projections) and the logits within the tolerance, relative to their
    largest. Prints one line; returns whether both hold."""
    err = np.abs(logits - one_logits).max() / np.abs(one_logits).max()
    same = tokens == one_tokens
    ok = err <= tol and bool(same.all())
    print(f"  {name:<28} {device} f32: logits max rel. difference from one device {err:.2e} (tolerance "
          f"{tol:.0e}), tokens {int(same.sum())}/{same.size} = one device's{'' if ok else '  MISMATCH'}")
    return ok


def print_timing(name, seconds_per_step, batch):
    print(f"  {name:<36} {seconds_per_step * 1e3:9.3f} ms/step {batch / seconds_per_step:10.0f} tokens/s")
