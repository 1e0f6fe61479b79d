"""float64 numpy references of the example ops, and the tolerance each dtype
earns (‖out − ref‖ / ‖ref‖), shared by the JAX, PyTorch and GPU tests."""

import math

import ml_dtypes
import numpy as np

TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1.5e-2}
# A CUDA body against the CPU body: in float64 the two libms (erf, exp) and
# summation orders differ by ulps, which an ill-conditioned output magnifies
# (glu's 1 + erf(x) at x = -5; rms_norm_backward's g - n * mean(g * n) when a
# row has one element): seen on an H100, 2e-9 and 4e-8.
CROSS_DEVICE_TOLERANCE = {**TOLERANCE, "float64": 1e-6}


def rms_norm(x, weight, eps, bias=None):
    x = np.asarray(x, np.float64)
    rstd = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    out = x * rstd
    if weight is not None:
        out = out * np.asarray(weight, np.float64)
    if bias is not None:
        out = out + np.asarray(bias, np.float64)
    return out, rstd[..., 0]


_GATES = {
    "sigmoid": lambda b: 1.0 / (1.0 + np.exp(-b)),
    "gelu": lambda b: 0.5 * b * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(b / math.sqrt(2.0))),
    "silu": lambda b: b / (1.0 + np.exp(-b)),
}


def glu(x, activation="sigmoid"):
    x = np.asarray(x, np.float64)
    half = x.shape[-1] // 2
    return x[..., :half] * _GATES[activation](x[..., half:])


def softmax(x):
    """Softmax over the last axis in float64, the maximum subtracted (a row that is all -inf gives NaN)."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(-1, keepdims=True, initial=-np.inf))
        return e / e.sum(-1, keepdims=True)


def topk_softmax(x, topk, renormalize=False):
    """vLLM's router in float64: each row's softmax, its topk largest
    probabilities, descending, the lower index first among equals (a stable
    sort), and the weights divided by their sum with renormalize."""
    p = softmax(x)
    indices = np.argsort(-p, axis=-1, kind="stable")[..., :topk]
    weights = np.take_along_axis(p, indices, -1)
    if renormalize:
        weights = weights / weights.sum(-1, keepdims=True)
    return weights, indices


def rotary_embedding(positions, query, key, cos_sin_cache, head_size, is_neox=True):
    """vLLM's rotary embedding, in float64: the rotated (query, key)."""
    cache = np.asarray(cos_sin_cache, np.float64)
    rot = cache.shape[1]
    half = rot // 2

    def rotate(x):
        x = np.asarray(x, np.float64).copy()
        heads = x.reshape(x.shape[0], -1, head_size)
        for n, p in enumerate(np.asarray(positions)):
            if not 0 <= p < cache.shape[0]:
                continue  # left as it is
            cos, sin = cache[p, :half], cache[p, half:]
            xi = np.arange(half) if is_neox else 2 * np.arange(half)
            yi = xi + half if is_neox else xi + 1
            a, b = heads[n][:, xi].copy(), heads[n][:, yi].copy()
            heads[n][:, xi] = a * cos - b * sin
            heads[n][:, yi] = b * cos + a * sin
        return heads.reshape(x.shape)

    return rotate(query), rotate(key)


def paged_attention_decode(query, key_cache, value_cache, block_tables, context_lens, scale):
    """Decode attention over a paged cache, in float64: each sequence's tokens
    gathered through its block table, then a plain softmax. NaN for a sequence
    whose context length or used block ids are out of range, zeros for an
    empty context (as the spec says)."""
    query, key_cache, value_cache = (np.asarray(a, np.float64) for a in (query, key_cache, value_cache))
    seqs, heads, dh = query.shape
    blocks, block_size, kv_heads, _ = key_cache.shape
    out = np.zeros_like(query)
    for s in range(seqs):
        n = int(context_lens[s])
        if not 0 <= n <= block_tables.shape[1] * block_size:
            out[s] = np.nan
            continue
        ids = np.asarray(block_tables[s, :(n + block_size - 1) // block_size], np.int64)
        if np.any((ids < 0) | (ids >= blocks)):
            out[s] = np.nan
            continue
        if n == 0:
            continue
        k = key_cache[ids].reshape(-1, kv_heads, dh)[:n]  # [n, KVH, Dh]
        v = value_cache[ids].reshape(-1, kv_heads, dh)[:n]
        kvh = np.arange(heads) // (heads // kv_heads)
        logits = np.einsum("hd,nhd->hn", query[s], k[:, kvh]) * scale
        p = np.exp(logits - logits.max(-1, keepdims=True))
        out[s] = np.einsum("hn,nhd->hd", p / p.sum(-1, keepdims=True), v[:, kvh])
    return out


def fused_add_rms_norm(x, residual, weight, eps, dtype):
    """vLLM's fused add + RMS norm, in float64 after the sum is rounded to
    `dtype` as the op stores it: the new (x, residual)."""
    total = (np.asarray(x, np.float64) + np.asarray(residual, np.float64)).astype(dtype).astype(np.float64)
    rstd = 1.0 / np.sqrt((total * total).mean(-1, keepdims=True) + eps)
    return total * rstd * np.asarray(weight, np.float64), total


def relative_error(got, ref):
    got = np.asarray(got, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert np.all(np.isfinite(got)), "non-finite values in the result"
    return np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300)


def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping):
    """New caches with each token's key and value at its slot; -1 and slots
    outside the caches write nothing."""
    key_cache, value_cache = np.array(key_cache), np.array(value_cache)
    blocks, block_size = key_cache.shape[:2]
    for t, slot in enumerate(np.asarray(slot_mapping)):
        if 0 <= slot < blocks * block_size:
            key_cache[slot // block_size, slot % block_size] = key[t]
            value_cache[slot // block_size, slot % block_size] = value[t]
    return key_cache, value_cache


# The largest finite value of each 8-bit float, its mantissa bits and its
# smallest normal exponent.
FP8 = {"float8_e4m3fn": (448.0, 3, -6), "float8_e5m2": (57344.0, 2, -14)}


def dynamic_per_token_scaled_fp8_quant(x, out_dtype, scale_ub=None):
    """vLLM's per-token quantisation in float64, before the rounding to
    `out_dtype`: each row's scale (its max |x|, at most scale_ub, over the
    dtype's largest finite value; at least 1 / (max * 512)) and x / scale
    clipped to the finite range."""
    top = FP8[out_dtype][0]
    x = np.asarray(x, np.float64)
    amax = np.abs(x).max(-1, initial=0.0)
    if scale_ub is not None:
        amax = np.minimum(amax, float(np.asarray(scale_ub, np.float64)))
    scale = np.maximum(amax / top, 1.0 / (top * 512.0))
    return np.clip(x / scale[..., None], -top, top), scale


# Each output dtype of rms_norm_dynamic_per_token_quant (vLLM's): the value a
# row's max |y| maps to, the smallest scale, and the range out saturates to.
QUANT8 = {"float8_e4m3fn": (448.0, 1.0 / (448.0 * 512.0), 448.0),
          "int8": (127.0, float(np.finfo(np.float32).eps), (-128.0, 127.0))}


def rms_norm_dynamic_per_token_quant(x, weight, eps, out_dtype, residual=None, scale_ub=None):
    """vLLM's residual add, RMS norm and per-token quantisation: in float64
    where the op's doc states no rounding, rounded where it does (the sum in
    f32, the new residual in x's dtype T, rstd to f32, y = T(T(s * rstd) *
    weight) with each product in f32). Returns (out, q, scale, y, residual):
    out as the doc rounds it (y / scale in f32 to the nearest e4m3fn, or y *
    (1 / scale) in f32 to the nearest integer, ties to even, saturated), q =
    y / scale in float64 saturated to out_dtype's range (out before its
    rounding), each row's scale, y, and the new residual (None without one)."""
    dtype = np.asarray(x).dtype
    s = np.asarray(x).astype(np.float32)
    if residual is not None:
        s = s + np.asarray(residual).astype(np.float32)
    s64 = s.astype(np.float64)
    rstd = np.float32(1.0 / np.sqrt((s64 * s64).mean(-1, keepdims=True) + float(np.float32(eps))))
    y = (s * rstd).astype(dtype).astype(np.float32)
    y = (y * np.asarray(weight).astype(np.float32)).astype(dtype).astype(np.float32)
    top, smallest, limits = QUANT8[out_dtype]
    low, high = limits if isinstance(limits, tuple) else (-limits, limits)
    amax = np.abs(y.astype(np.float64)).max(-1, initial=0.0)
    if scale_ub is not None:
        amax = np.minimum(amax, float(np.asarray(scale_ub, np.float64).reshape(())))
    scale = np.maximum(amax / top, smallest)
    q = np.clip(y / scale[..., None], low, high)
    # f32's quotients (a float64 quotient of f32 values rounded to f32 is the f32 one).
    scale32 = scale.astype(np.float32)[..., None]
    if out_dtype == "int8":
        out = np.clip(np.rint(y * (np.float32(1) / scale32)), low, high).astype(np.float64)
    else:
        out = np.clip(y / scale32, low, high).astype(getattr(ml_dtypes, out_dtype)).astype(np.float64)
    return out, q, scale, y.astype(np.float64), None if residual is None else s.astype(dtype)


def fp8_ulp(value, out_dtype):
    """The spacing of `out_dtype`'s values at each |value| (that of the
    subnormals below the smallest normal exponent)."""
    _, mantissa, min_exp = FP8[out_dtype]
    a = np.abs(np.asarray(value, np.float64))
    exp = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    return np.exp2(np.maximum(exp, min_exp) - mantissa)
