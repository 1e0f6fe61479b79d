"""paged_attention_decode, decode attention over a paged KV cache: against a
float64 gather-and-softmax reference through JAX and PyTorch, grouped-query
heads, every head size and block size the spec allows, empty contexts, and
the documented answer (NaN for that sequence alone) to a context length or a
block id out of range. On a GPU, contexts of several partitions exercise
the CUDA body's split and combine, in its tensor-core kernel (f16 and bf16
queries over caches of their type or fp8, at aligned addresses) and its
CUDA-core kernel (f32 queries, unaligned caches); skipped without one. An fp8 cache (kv_cache_dtype, with
k_scale and v_scale) is checked against the reference over the values it
holds, K = k_scale * key_cache."""

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

CPU = jax.devices("cpu")[0]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def problem(rng, dtype, seqs=4, heads=8, kv_heads=2, dh=64, bs=16, max_blocks=6, blocks=None):
    """Caches with more blocks than the sequences use, each sequence's blocks
    drawn without repeats from them, contexts from empty to full."""
    blocks = blocks or seqs * max_blocks + 3
    query = rng.standard_normal((seqs, heads, dh)).astype(DTYPES[dtype])
    key_cache = rng.standard_normal((blocks, bs, kv_heads, dh)).astype(DTYPES[dtype])
    value_cache = rng.standard_normal((blocks, bs, kv_heads, dh)).astype(DTYPES[dtype])
    tables = np.stack([rng.permutation(blocks)[:max_blocks] for _ in range(seqs)]).astype(np.int32)
    lens = rng.integers(1, max_blocks * bs + 1, seqs).astype(np.int32)
    lens[0] = max_blocks * bs  # a full table
    if seqs > 2:
        lens[1] = 0  # an empty context: zeros
    return query, key_cache, value_cache, tables, lens, 1.0 / np.sqrt(dh)


def as_float64(x):
    return as_numpy(x).astype(np.float64)


def jax_call(p, device=CPU, api_version=4):
    *arrays, scale = p
    f = jax.jit(lambda *a: jops.paged_attention_decode(*a, scale=scale, api_version=api_version))
    return f(*(jax.device_put(a, device) for a in arrays))


def torch_call(p, device="cpu"):
    *arrays, scale = p
    return tops.paged_attention_decode(*(to_torch(a, device) for a in arrays), scale=scale)


def check(got, p, dtype):
    want = ref.paged_attention_decode(*p)
    assert ref.relative_error(as_float64(got), want) < ref.TOLERANCE[dtype]


# (heads, kv_heads): multi-head, grouped by 4, by 8, and a group of 12 that
# the CUDA body splits across two blocks.
GROUPS = [(4, 4), (8, 2), (16, 2), (24, 2)]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("heads, kv_heads", GROUPS)
def test_jax_matches_the_reference(rng, dtype, api_version, heads, kv_heads):
    p = problem(rng, dtype, heads=heads, kv_heads=kv_heads)
    check(jax_call(p, api_version=api_version), p, dtype)


@pytest.mark.parametrize("dh", [64, 128, 256])
@pytest.mark.parametrize("bs", [16, 32])
def test_torch_matches_the_reference_for_every_head_and_block_size(rng, dh, bs):
    p = problem(rng, "float32", dh=dh, bs=bs)
    check(torch_call(p), p, "float32")


def out_of_range(rng, dtype):
    """Sequence 1 reaches a block id past the cache, 2 a negative one, 3 has a
    context longer than its table and 4 a negative one; 0 and 5 are valid (5
    has a bad id past its context, which is not read)."""
    query, key_cache, value_cache, tables, lens, scale = problem(rng, dtype, seqs=6, max_blocks=4)
    lens[:] = [64, 20, 40, 0, 5, 17]
    blocks = key_cache.shape[0]
    tables[1, 1] = blocks
    tables[2, 2] = -1
    lens[3] = tables.shape[1] * 16 + 1
    lens[4] = -3
    tables[5, 3] = blocks + 100
    return query, key_cache, value_cache, tables, lens, scale


def check_out_of_range(got, p, dtype):
    got = as_float64(got)
    bad = [1, 2, 3, 4]
    assert np.isnan(got[bad]).all(), "a sequence with an index out of range gets NaN in every head"
    good = [0, 5]
    want = ref.paged_attention_decode(*p)
    assert ref.relative_error(got[good], want[good]) < ref.TOLERANCE[dtype]


def test_indices_out_of_range_give_nan_for_that_sequence_alone(rng):
    p = out_of_range(rng, "float32")
    check_out_of_range(jax_call(p), p, "float32")
    check_out_of_range(torch_call(p), p, "float32")


def test_a_head_size_the_spec_does_not_allow_is_refused(rng):
    p = problem(rng, "float32", dh=32)
    with pytest.raises(ValueError, match=r"the spec requires Dh in \[64, 128, 256\], but Dh = 32"):
        jax_call(p)
    p = problem(rng, "float32", heads=6, kv_heads=4)
    with pytest.raises(RuntimeError, match=r"the spec requires H % KVH == 0, but H = 6, KVH = 4"):
        torch_call(p)


# --- GPU --------------------------------------------------------------------------------------

needs_torch_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
needs_jax_gpu = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


@needs_jax_gpu
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("dh", [64, 128, 256])
@pytest.mark.parametrize("heads, kv_heads", GROUPS)
def test_jax_cuda_long_contexts_split_into_partitions(rng, dtype, dh, heads, kv_heads):
    # Up to 40 blocks of 32 tokens: contexts of up to 5 partitions of 256.
    p = problem(rng, dtype, seqs=3, heads=heads, kv_heads=kv_heads, dh=dh, bs=32, max_blocks=40)
    for api_version in (4, 3):
        check(jax_call(p, gpu_devices()[0], api_version), p, dtype)


@needs_torch_cuda
@pytest.mark.parametrize("bs", [16, 32])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_torch_cuda_long_contexts_split_into_partitions(rng, bs, dtype):
    p = problem(rng, dtype, seqs=5, heads=8, kv_heads=1, dh=128, bs=bs, max_blocks=2048 // bs + 5)
    check(torch_call(p, "cuda"), p, dtype)


@needs_torch_cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_cuda_wide_tables_take_longer_partitions(rng, dtype):
    """Block tables 16384 tokens wide: enough blocks of work for the tensor-core
    kernel to cut contexts into partitions longer than the workspace's 256
    tokens (2048 on an H100), here one to three of them. Table entries repeat
    blocks, as sequences that share a prefix do."""
    seqs, heads, kv_heads, dh, bs, max_blocks, blocks = 8, 16, 8, 128, 16, 1024, 64
    query = rng.standard_normal((seqs, heads, dh)).astype(DTYPES[dtype])
    key_cache = rng.standard_normal((blocks, bs, kv_heads, dh)).astype(DTYPES[dtype])
    value_cache = rng.standard_normal((blocks, bs, kv_heads, dh)).astype(DTYPES[dtype])
    tables = rng.integers(0, blocks, (seqs, max_blocks)).astype(np.int32)
    lens = rng.integers(1, 6500, seqs).astype(np.int32)
    lens[:3] = [2048, 2049, 6144]  # one partition, one token into the second, three whole ones
    p = (query, key_cache, value_cache, tables, lens, 1.0 / np.sqrt(dh))
    check(torch_call(p, "cuda"), p, dtype)


@needs_torch_cuda
def test_torch_cuda_caches_that_are_not_16_byte_aligned(rng):
    """Contiguous caches one element into their storage: the body's element
    loads, not its vector loads."""
    p = problem(rng, "float16", dh=64, max_blocks=20)
    q, k, v, tables, lens, scale = (to_torch(a, "cuda") if isinstance(a, np.ndarray) else a for a in p)
    shifted = [torch.empty(x.numel() + 1, dtype=x.dtype, device="cuda")[1:].view(x.shape) for x in (k, v)]
    for s, x in zip(shifted, (k, v)):
        s.copy_(x)
    assert shifted[0].data_ptr() % 16 != 0
    check(tops.paged_attention_decode(q, *shifted, tables, lens, scale=scale), p, "float16")


@needs_torch_cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])  # the CUDA-core kernel and the tensor-core one
def test_torch_cuda_indices_out_of_range_give_nan_for_that_sequence_alone(rng, dtype):
    p = out_of_range(rng, dtype)
    check_out_of_range(torch_call(p, "cuda"), p, dtype)
    # Long contexts: the bad block id sits in the second of three partitions.
    query, key_cache, value_cache, tables, lens, scale = problem(rng, dtype, seqs=3, bs=16, max_blocks=96)
    lens[:] = 96 * 16
    tables[1, 40] = key_cache.shape[0]
    got = as_float64(torch_call((query, key_cache, value_cache, tables, lens, scale), "cuda"))
    assert np.isnan(got[1]).all()
    want = ref.paged_attention_decode(query, key_cache, value_cache, tables, lens, scale)
    assert ref.relative_error(got[[0, 2]], want[[0, 2]]) < ref.TOLERANCE[dtype]


def test_torch_compile_fullgraph_matches_the_reference(rng):
    p = problem(rng, "float32")
    *arrays, scale = p
    f = torch.compile(lambda *a: tops.paged_attention_decode(*a, scale=float(scale)) * 2, fullgraph=True)
    got = f(*(to_torch(a) for a in arrays))
    check(got / 2, p, "float32")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_query_may_be_a_view_of_the_qkv_projection(rng, device):
    """vLLM passes the query as a slice of the qkv projection with its own
    stride: the kernel reads it where it is, with no copy."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    dtype = "float32" if device == "cpu" else "bfloat16"
    p = problem(rng, dtype, heads=8, kv_heads=2, dh=64)
    query, *rest, scale = p
    seqs, heads, dh = query.shape
    qkv = to_torch(rng.standard_normal((seqs, (heads + 4) * dh)).astype(DTYPES[dtype]), device)
    view = qkv[:, :heads * dh].view(seqs, heads, dh)
    view.copy_(to_torch(query, device))
    assert not view.is_contiguous() and view.stride() == ((heads + 4) * dh, dh, 1)
    got = tops.paged_attention_decode(view, *(to_torch(a, device) for a in rest), scale=scale)
    check(got, p, dtype)
    # Heads further apart than a head's length, too.
    wide = to_torch(np.zeros((seqs, heads, 2 * dh), DTYPES[dtype]), device)[:, :, :dh]
    wide.copy_(to_torch(query, device))
    check(tops.paged_attention_decode(wide, *(to_torch(a, device) for a in rest), scale=scale), p, dtype)


# --- fp8 caches (kv_cache_dtype, k_scale, v_scale) ----------------------------------------------

FP8 = {"fp8": ml_dtypes.float8_e4m3fn, "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}


def fp8_problem(rng, kv_cache_dtype, dtype="bfloat16", **shape):
    """problem()'s caches divided by their scales and rounded to the fp8 dtype,
    as reshape_and_cache writes them; the scales as [] and [1] arrays."""
    query, key_cache, value_cache, tables, lens, scale = problem(rng, dtype, **shape)
    k_scale, v_scale = np.float32(0.02), np.array([0.05], np.float32)
    fp8 = FP8[kv_cache_dtype]
    key_cache = (key_cache.astype(np.float32) / k_scale).astype(fp8)
    value_cache = (value_cache.astype(np.float32) / v_scale).astype(fp8)
    return query, key_cache, value_cache, tables, lens, k_scale, v_scale, scale


def check_fp8(got, p, dtype):
    """Against the float64 reference over what the caches hold, scaled back."""
    query, key_cache, value_cache, tables, lens, k_scale, v_scale, scale = p
    want = ref.paged_attention_decode(query, key_cache.astype(np.float64) * k_scale,
                                      value_cache.astype(np.float64) * v_scale[0], tables, lens, scale)
    assert ref.relative_error(as_float64(got), want) < ref.TOLERANCE[dtype]


def torch_fp8_call(p, kv_cache_dtype, device="cpu"):
    *arrays, scale = p
    return tops.paged_attention_decode(*(to_torch(np.asarray(a), device) for a in arrays), scale=scale,
                                       kv_cache_dtype=kv_cache_dtype)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("kv_cache_dtype", list(FP8))
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_torch_reads_an_fp8_cache_scaled(rng, device, kv_cache_dtype, dtype):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    p = fp8_problem(rng, kv_cache_dtype, dtype, heads=16, kv_heads=2)
    check_fp8(torch_fp8_call(p, kv_cache_dtype, device), p, dtype)


@pytest.mark.parametrize("device", [CPU] + gpu_devices(), ids=lambda d: d.platform)
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_reads_an_fp8_cache_under_jit(rng, device, api_version):
    p = fp8_problem(rng, "fp8", "bfloat16")
    *arrays, scale = p
    f = jax.jit(lambda *a: jops.paged_attention_decode(*a, scale=scale, kv_cache_dtype="fp8", api_version=api_version))
    check_fp8(f(*(jax.device_put(np.asarray(a), device) for a in arrays)), p, "bfloat16")


def test_what_reshape_and_cache_writes_in_fp8_decodes_as_vllm_reads_it(rng):
    """reshape_and_cache writes key / k_scale in fp8; the decode reads it back
    times k_scale: the same as the reference over those caches."""
    query, key_cache, value_cache, tables, lens, scale = problem(rng, "bfloat16", seqs=2, max_blocks=2)
    k_cache = torch.zeros(key_cache.shape, dtype=torch.float8_e4m3fn)
    v_cache = torch.zeros(value_cache.shape, dtype=torch.float8_e4m3fn)
    blocks, bs = key_cache.shape[:2]
    slots = torch.arange(blocks * bs)
    ks, vs = torch.tensor(0.02), torch.tensor(0.05)
    tops.reshape_and_cache(to_torch(key_cache).reshape(-1, *key_cache.shape[2:]),
                           to_torch(value_cache).reshape(-1, *value_cache.shape[2:]), k_cache, v_cache, slots, ks, vs,
                           kv_cache_dtype="fp8")
    got = tops.paged_attention_decode(to_torch(query), k_cache, v_cache, to_torch(tables), to_torch(lens), ks, vs,
                                      scale=scale, kv_cache_dtype="fp8")
    p = (query, as_numpy(k_cache.view(torch.uint8)).view(ml_dtypes.float8_e4m3fn),
         as_numpy(v_cache.view(torch.uint8)).view(ml_dtypes.float8_e4m3fn), tables, lens, np.float32(0.02),
         np.array([0.05], np.float32), scale)
    check_fp8(got, p, "bfloat16")


@needs_torch_cuda
@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e5m2"])
@pytest.mark.parametrize("dh", [64, 128, 256])
def test_torch_cuda_fp8_long_contexts_split_into_partitions(rng, kv_cache_dtype, dh):
    p = fp8_problem(rng, kv_cache_dtype, "bfloat16", seqs=3, heads=16, kv_heads=2, dh=dh, bs=32, max_blocks=40)
    check_fp8(torch_fp8_call(p, kv_cache_dtype, "cuda"), p, "bfloat16")


# (dtype, the heads' exponents, the scale's exponent): bf16 heads far beyond
# f16's range both ways, f16 heads down into its subnormals. The scale brings
# the middle heads' logits to about 1, so that each end matters: a head whose
# query were lost (zero, infinite) would show.
MAGNITUDES = [("bfloat16", (60, 120), -90), ("bfloat16", (-124, -100), 112), ("float16", (-20, -4), 12),
              ("float16", (0, 12), -6)]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype, exponents, scale_exponent", MAGNITUDES)
def test_fp8_reads_query_heads_of_any_magnitude(rng, device, dtype, exponents, scale_exponent):
    """The tensor-core kernel multiplies an fp8 cache in f16, each query head
    scaled by its own power of two (held to at most 2^126): its logits keep
    what the head holds, whatever its magnitude. The CPU body as the control."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    p = fp8_problem(rng, "fp8", dtype, seqs=2, heads=16, kv_heads=2, dh=128, bs=16, max_blocks=20)
    query = p[0].astype(np.float32) * np.exp2(np.round(np.linspace(*exponents, 16)))[None, :, None]
    p = (query.astype(DTYPES[dtype]), *p[1:-1], float(np.exp2(scale_exponent) / np.sqrt(128)))
    check_fp8(torch_fp8_call(p, "fp8", device), p, dtype)


@needs_torch_cuda
def test_torch_cuda_fp8_caches_that_are_not_16_byte_aligned(rng):
    """An fp8 cache one byte into its storage: the CUDA-core kernel's element loads."""
    p = fp8_problem(rng, "fp8", "bfloat16", heads=16, kv_heads=2, max_blocks=20)
    query, k, v, tables, lens, k_scale, v_scale, scale = p
    shifted = []
    for x in (k, v):
        storage = torch.empty(x.size + 1, dtype=torch.uint8, device="cuda")[1:]
        storage.copy_(torch.from_numpy(x.view(np.uint8).reshape(-1)))
        shifted.append(storage.view(torch.float8_e4m3fn).view(x.shape))
    assert shifted[0].data_ptr() % 16 != 0
    got = tops.paged_attention_decode(to_torch(query, "cuda"), *shifted, to_torch(tables, "cuda"),
                                      to_torch(lens, "cuda"), to_torch(np.asarray(k_scale), "cuda"),
                                      to_torch(v_scale, "cuda"), scale=scale, kv_cache_dtype="fp8")
    check_fp8(got, p, "bfloat16")


# e4m3's rounding: 3 significand bits after the leading one, to nearest, so
# an error spread evenly within half a spacing, +-2^(e-4), of a value
# 2^e (1 + f). With f spread log-uniformly (as a normal sample's are), the
# relative error's mean square is (2^-3)^2 / 12 * E[(1 + f)^-2], and
# E[(1 + f)^-2] = 3 / (8 ln 2).
E4M3_RMS = 2**-3 / np.sqrt(12) * np.sqrt(3 / (8 * np.log(2)))  # 0.0265


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_fp8_cache_decodes_within_its_rounding_of_the_unrounded_one(rng, device):
    """The decode over caches written in fp8 by reshape_and_cache (each scaled
    by its largest value over 448, as vLLM calibrates) against the decode over
    the caches themselves. Queries and keys of unit variance with scale
    Dh^-1/2 give logits of unit variance. A key's rounding moves its logit by
    about E4M3_RMS (Dh terms q_d k_d eps_d, scaled), which moves the output
    sum_i p_i (v_i - o) ds_i by E4M3_RMS of the output's size (the output, a
    weighted mean of independent values, has size |p| sqrt(Dh), as that sum
    has); a value's rounding moves sum_i p_i v_i eps_i as much; the two add in
    quadrature: sqrt(2) E4M3_RMS = 0.0375 of the output. The check allows 25%
    more, and less than half would mean the fp8 cache was not what was read."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    seqs, heads, kv_heads, dh, bs, blocks = 4, 16, 2, 128, 16, 32
    g = lambda *shape: torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(device, dtype)  # noqa: E731
    query, caches = g(seqs, heads, dh), [g(blocks, bs, kv_heads, dh) for _ in range(2)]
    tables = torch.from_numpy(np.stack([rng.permutation(blocks)[:8] for _ in range(seqs)]).astype(np.int32)).to(device)
    lens = torch.tensor([128, 77, 100, 5], dtype=torch.int32, device=device)
    scales = [c.abs().amax().float() / 448 for c in caches]
    fp8 = [torch.empty(c.shape, dtype=torch.float8_e4m3fn, device=device) for c in caches]
    tops.reshape_and_cache(*(c.view(-1, kv_heads, dh) for c in caches), *fp8,
                           torch.arange(blocks * bs, device=device), *scales, kv_cache_dtype="fp8")
    exact = tops.paged_attention_decode(query, *caches, tables, lens, scale=dh**-0.5)
    rounded = tops.paged_attention_decode(query, *fp8, tables, lens, *scales, scale=dh**-0.5, kv_cache_dtype="fp8")
    distance = ref.relative_error(as_float64(rounded), as_float64(exact))
    assert 0.5 * np.sqrt(2) * E4M3_RMS < distance < 1.25 * np.sqrt(2) * E4M3_RMS, distance
