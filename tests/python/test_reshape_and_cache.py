"""reshape_and_cache (vLLM's reshape_and_cache_flash): each token's key and
value land at its slot of the paged caches, in place, against a numpy
reference on fresh random data: padding (-1) and slots outside the caches
write nothing, the key and value may be views of one qkv projection, JAX
updates donated caches without a copy, and what it writes is what
paged_attention_decode reads. GPU variants skip without a GPU."""

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
