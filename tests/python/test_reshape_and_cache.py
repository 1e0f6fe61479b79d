"""reshape_and_cache (vLLM's reshape_and_cache_flash): each token's key and
value land at its slot of the paged caches, in place, against a numpy
reference on fresh random data: padding (-1) and slots outside the caches
write nothing, the key and value may be views of one qkv projection, JAX
updates donated caches without a copy, and what it writes is what
paged_attention_decode reads. An fp8 cache (vLLM's kv_cache_dtype, a type
variable the attribute chooses) holds the keys and values divided by their
scales, rounded and saturated. GPU variants skip without a GPU."""

import jax
import ml_dtypes
import numpy as np
import pytest
import torch

import op_references as ref
import opgen_ops.jax as jops
import opgen_ops.torch as tops
from conftest import gpu_devices
from torch_arrays import as_numpy, to_torch

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
TORCH_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
JAX_DEVICES = [jax.devices("cpu")[0]] + gpu_devices()


def problem(rng, dtype, tokens=7, kv_heads=2, dh=16, blocks=5, bs=4, slot_dtype=np.int64):
    """Distinct slots for the tokens, one padded (-1) and one past the caches."""
    key = rng.standard_normal((tokens, kv_heads, dh)).astype(DTYPES[dtype])
    value = rng.standard_normal((tokens, kv_heads, dh)).astype(DTYPES[dtype])
    key_cache = rng.standard_normal((blocks, bs, kv_heads, dh)).astype(DTYPES[dtype])
    value_cache = rng.standard_normal((blocks, bs, kv_heads, dh)).astype(DTYPES[dtype])
    slots = rng.permutation(blocks * bs)[:tokens].astype(slot_dtype)
    slots[1] = -1
    slots[3] = blocks * bs + 2
    return key, value, key_cache, value_cache, slots


@pytest.mark.parametrize("device", TORCH_DEVICES)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("slot_dtype", [np.int64, np.int32])
def test_torch_writes_each_token_at_its_slot_in_place(rng, device, dtype, slot_dtype):
    p = problem(rng, dtype, slot_dtype=slot_dtype)
    want_k, want_v = ref.reshape_and_cache(*p)
    key, value, key_cache, value_cache, slots = (to_torch(a, device) for a in p)
    k_out, v_out = tops.reshape_and_cache(key, value, key_cache, value_cache, slots)
    assert k_out is key_cache and v_out is value_cache
    assert np.array_equal(as_numpy(key_cache), want_k) and np.array_equal(as_numpy(value_cache), want_v)


@pytest.mark.parametrize("device", TORCH_DEVICES)
def test_torch_key_and_value_may_be_views_of_the_qkv_projection(rng, device):
    key, value, key_cache, value_cache, slots = problem(rng, "float32")
    tokens, kv_heads, dh = key.shape
    qkv = np.concatenate([rng.standard_normal((tokens, 3 * kv_heads * dh)).astype(np.float32),
                          key.reshape(tokens, -1), value.reshape(tokens, -1)], axis=1)
    t = to_torch(qkv, device)
    k_view = t[:, 3 * kv_heads * dh:4 * kv_heads * dh].view(tokens, kv_heads, dh)
    v_view = t[:, 4 * kv_heads * dh:].view(tokens, kv_heads, dh)
    assert not k_view.is_contiguous()
    caches = [to_torch(key_cache, device), to_torch(value_cache, device)]
    tops.reshape_and_cache(k_view, v_view, *caches, to_torch(slots, device))
    want_k, want_v = ref.reshape_and_cache(key, value, key_cache, value_cache, slots)
    assert np.array_equal(as_numpy(caches[0]), want_k) and np.array_equal(as_numpy(caches[1]), want_v)


@pytest.mark.parametrize("device", JAX_DEVICES, ids=lambda d: d.platform)
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_updates_donated_caches_without_a_copy(rng, device, api_version):
    p = problem(rng, "float32", slot_dtype=np.int32)
    want_k, want_v = ref.reshape_and_cache(*p)
    f = jax.jit(lambda *a: jops.reshape_and_cache(*a, api_version=api_version), donate_argnums=(2, 3))
    args = [jax.device_put(a, device) for a in p]
    hlo = f.lower(*args).compile().as_text()
    assert "copy(" not in hlo and "copy-start" not in hlo, hlo
    k_out, v_out = f(*args)
    assert np.array_equal(np.asarray(k_out), want_k) and np.array_equal(np.asarray(v_out), want_v)


@pytest.mark.parametrize("device", JAX_DEVICES, ids=lambda d: d.platform)
@pytest.mark.parametrize("api_version", [4, 3])
def test_no_token_leaves_the_caches_as_they_are(rng, device, api_version):
    """No token (N = 0) beside caches that are not empty: the body runs, and on
    CUDA once launched a grid of 0 blocks (cudaErrorInvalidValue; issue 37's
    differential test on the GPU machine)."""
    key, value, key_cache, value_cache, slots = problem(rng, "float32", slot_dtype=np.int32)
    args = [jax.device_put(a, device) for a in (key[:0], value[:0], key_cache, value_cache, slots[:0])]
    k_out, v_out = jops.reshape_and_cache(*args, api_version=api_version)
    assert np.array_equal(np.asarray(k_out), key_cache) and np.array_equal(np.asarray(v_out), value_cache)
    for device in TORCH_DEVICES:
        caches = [to_torch(key_cache, device), to_torch(value_cache, device)]
        tops.reshape_and_cache(to_torch(key[:0], device), to_torch(value[:0], device), *caches,
                               to_torch(slots[:0], device))
        assert np.array_equal(as_numpy(caches[0]), key_cache) and np.array_equal(as_numpy(caches[1]), value_cache)


@pytest.mark.parametrize("device", TORCH_DEVICES)
def test_what_it_writes_is_what_paged_attention_reads(rng, device):
    """A decode step: the new token's key and value go to slot context_len
    of its sequence, and attention over context_len + 1 tokens sees them."""
    seqs, heads, kv_heads, dh, bs, max_blocks = 3, 4, 2, 64, 16, 4
    blocks = seqs * max_blocks
    key_cache = to_torch(rng.standard_normal((blocks, bs, kv_heads, dh)).astype(np.float32), device)
    value_cache = to_torch(rng.standard_normal((blocks, bs, kv_heads, dh)).astype(np.float32), device)
    tables = torch.from_numpy(rng.permutation(blocks).reshape(seqs, max_blocks).astype(np.int32)).to(device)
    lens = torch.tensor([5, 17, 40], dtype=torch.int32, device=device)
    query = to_torch(rng.standard_normal((seqs, heads, dh)).astype(np.float32), device)
    key = to_torch(rng.standard_normal((seqs, kv_heads, dh)).astype(np.float32), device)
    value = to_torch(rng.standard_normal((seqs, kv_heads, dh)).astype(np.float32), device)
    slots = tables[torch.arange(seqs, device=device), (lens // bs).long()].long() * bs + (lens % bs).long()
    tops.reshape_and_cache(key, value, key_cache, value_cache, slots)
    got = tops.paged_attention_decode(query, key_cache, value_cache, tables, lens + 1, scale=dh**-0.5)
    want = ref.paged_attention_decode(*(as_numpy(a) for a in (query, key_cache, value_cache, tables, lens + 1)),
                                      dh**-0.5)
    assert ref.relative_error(as_numpy(got).astype(np.float64), want) < ref.TOLERANCE["float32"]
    # The new token is among those attended to: with its value moved, the output moves.
    value_cache.view(-1, kv_heads, dh)[slots] += 1.0
    moved = tops.paged_attention_decode(query, key_cache, value_cache, tables, lens + 1, scale=dh**-0.5)
    assert not torch.allclose(moved, got)


# --- kv_cache_dtype: the caches' dtype, chosen by vLLM's string ---------------------------------

FP8 = {"fp8": ml_dtypes.float8_e4m3fn, "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}


def cached(x, scale, dtype):
    """x as a cache of `dtype` holds it: divided by the scale in f32, rounded
    to the nearest (ties to even), saturated to an fp8 dtype's finite range."""
    v = x.astype(np.float32)
    if scale is not None:
        v = v / np.float32(scale)
    if dtype in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        top = np.float32(ml_dtypes.finfo(dtype).max)
        v = np.where(np.isnan(v), v, np.clip(v, -top, top))
    return v.astype(dtype)


def fp8_problem(rng, dtype, kv_cache_dtype, tokens=9):
    """Keys and values of magnitudes from 2^-20 to 2^12 (past e4m3fn's 448 after
    the scale, and into its subnormals), caches of the chosen dtype, scales."""
    key, value, _, _, slots = problem(rng, dtype, tokens=tokens)
    key = (key.astype(np.float32) * np.exp2(rng.uniform(-20, 12, key.shape))).astype(DTYPES[dtype])
    value = (value.astype(np.float32) * np.exp2(rng.uniform(-20, 12, value.shape))).astype(DTYPES[dtype])
    cache_dtype = FP8[kv_cache_dtype]
    key_cache = rng.standard_normal((5, 4, 2, 16)).astype(cache_dtype)
    value_cache = rng.standard_normal((5, 4, 2, 16)).astype(cache_dtype)
    return key, value, key_cache, value_cache, slots, np.float32(0.75), np.float32(3.0)


def want_caches(key, value, key_cache, value_cache, slots, k_scale, v_scale):
    dtype = key_cache.dtype.type
    return ref.reshape_and_cache(cached(key, k_scale, dtype), cached(value, v_scale, dtype), key_cache, value_cache,
                                 slots)


def bits(x):
    """x's elements' bits (NaNs and -0 too), as unsigned integers."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[x.element_size()]).numpy()
    x = np.asarray(x)
    return x.view(f"u{x.itemsize}")


def same_bits(got, want):
    return np.array_equal(bits(got), bits(want))


@pytest.mark.parametrize("device", TORCH_DEVICES)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kv_cache_dtype", list(FP8))
def test_torch_writes_an_fp8_cache_scaled_rounded_and_saturated(rng, device, dtype, kv_cache_dtype):
    p = fp8_problem(rng, dtype, kv_cache_dtype)
    want_k, want_v = want_caches(*p)
    key, value, key_cache, value_cache, slots, k_scale, v_scale = (to_torch(np.asarray(a), device) for a in p)
    tops.reshape_and_cache(key, value, key_cache, value_cache, slots, k_scale, v_scale.reshape(1),
                           kv_cache_dtype=kv_cache_dtype)
    assert same_bits(key_cache, want_k) and same_bits(value_cache, want_v)


@pytest.mark.parametrize("device", JAX_DEVICES, ids=lambda d: d.platform)
@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e5m2"])
def test_jax_writes_an_fp8_cache_under_jit(rng, device, api_version, kv_cache_dtype):
    p = fp8_problem(rng, "bfloat16", kv_cache_dtype)
    want_k, want_v = want_caches(*p)
    args = [jax.device_put(np.asarray(a), device) for a in p]
    f = jax.jit(lambda *a: jops.reshape_and_cache(*a, kv_cache_dtype=kv_cache_dtype, api_version=api_version))
    k_out, v_out = f(*args)
    assert same_bits(k_out, want_k) and same_bits(v_out, want_v)


@pytest.mark.parametrize("device", TORCH_DEVICES)
def test_auto_keeps_the_keys_dtype_and_divides_by_the_scales_given(rng, device):
    key, value, key_cache, value_cache, slots = problem(rng, "bfloat16")
    for k_scale, v_scale in ((None, None), (np.float32(0.5), np.float32(3.0))):
        want_k, want_v = ref.reshape_and_cache(cached(key, k_scale, ml_dtypes.bfloat16),
                                               cached(value, v_scale, ml_dtypes.bfloat16), key_cache, value_cache,
                                               slots)
        caches = [to_torch(key_cache, device), to_torch(value_cache, device)]
        scales = [None if s is None else to_torch(np.asarray(s), device) for s in (k_scale, v_scale)]
        tops.reshape_and_cache(to_torch(key, device), to_torch(value, device), *caches, to_torch(slots, device),
                               *scales, kv_cache_dtype="auto")
        assert same_bits(caches[0], want_k) and same_bits(caches[1], want_v)


def test_a_cache_not_of_the_dtype_kv_cache_dtype_chooses_is_refused(rng):
    key, value, key_cache, value_cache, slots = (to_torch(a) for a in problem(rng, "bfloat16"))
    fp8_cache = torch.zeros(key_cache.shape, dtype=torch.float8_e4m3fn)
    with pytest.raises(RuntimeError, match="reshape_and_cache: input 'key_cache' has dtype bfloat16; attribute "
                                           "'kv_cache_dtype' chooses float8_e4m3fn for it"):
        tops.reshape_and_cache(key, value, key_cache, value_cache, slots, kv_cache_dtype="fp8")
    with pytest.raises(RuntimeError, match="input 'key_cache' has dtype float8_e4m3fn; attribute 'kv_cache_dtype' "
                                           "chooses bfloat16 for it"):
        tops.reshape_and_cache(key, value, fp8_cache, fp8_cache.clone(), slots)
    with pytest.raises(ValueError, match="kv_cache_dtype.*'fp16'.*auto, fp8, fp8_e4m3, fp8_e5m2"):
        jops.reshape_and_cache(*(np.asarray(as_numpy(t)) for t in (key, value, key_cache, value_cache, slots)),
                               kv_cache_dtype="fp16")
