"""rotary_embedding, vLLM's in-place rotary embedding: against a float64
reference through JAX and PyTorch, on the row views of one fused qkv tensor
(PyTorch updates qkv itself, without a copy), and the spec's constraints as
every entry point states them. The GPU variants skip without a GPU."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch

import op_references as ref
import opgen_ops.jax as jops
import opgen_ops.torch as tops
from conftest import gpu_devices

CPU = jax.devices("cpu")[0]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def problem(rng, dtype, n=5, heads=4, kv_heads=2, head_size=64, rot=32, positions=40):
    query = rng.standard_normal((n, heads * head_size)).astype(DTYPES[dtype])
    key = rng.standard_normal((n, kv_heads * head_size)).astype(DTYPES[dtype])
    angles = rng.uniform(0, 2 * np.pi, (positions, rot // 2))
    cache = np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(DTYPES[dtype])
    pos = rng.integers(0, positions, n).astype(np.int32)
    pos[0] = positions + 3  # outside [0, P): that token is left as it is
    return pos, query, key, cache


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_matches_the_reference(rng, dtype, is_neox, api_version):
    pos, query, key, cache = problem(rng, dtype)
    f = jax.jit(lambda *a: jops.rotary_embedding(*a, head_size=64, is_neox=is_neox, api_version=api_version))
    q, k = f(*(jax.device_put(x, CPU) for x in (pos, query, cache, key)))
    want_q, want_k = ref.rotary_embedding(pos, query, key, cache, 64, is_neox)
    assert ref.relative_error(q, want_q) < ref.TOLERANCE[dtype]
    assert ref.relative_error(k, want_k) < ref.TOLERANCE[dtype]
    np.testing.assert_array_equal(np.asarray(q)[0], query[0])  # position out of range: untouched


def qkv_views(rng, dtype, device, n=6, heads=4, kv_heads=2, head_size=64, rot=64):
    """vLLM's layout: one [n, q + k + v] tensor, query and key its column slices."""
    q_size, k_size = heads * head_size, kv_heads * head_size
    qkv = torch.randn(n, q_size + 2 * k_size, dtype=getattr(torch, dtype), device=device)
    pos, _, _, cache = problem(rng, dtype, n=n, heads=heads, kv_heads=kv_heads, head_size=head_size, rot=rot)
    return qkv, q_size, k_size, torch.from_numpy(pos).long().to(device), torch.from_numpy(np.asarray(cache, np.float32)).to(
        getattr(torch, dtype)).to(device)


def check_views_update_qkv(rng, dtype, device, is_neox):
    qkv, q_size, k_size, pos, cache = qkv_views(rng, dtype, device)
    before = qkv.clone()
    query, key = qkv[:, :q_size], qkv[:, q_size:q_size + k_size]
    assert not query.is_contiguous()
    q, k = tops.rotary_embedding(pos, query, cache, key, head_size=64, is_neox=is_neox)
    assert q.data_ptr() == query.data_ptr() and k.data_ptr() == key.data_ptr()  # the views themselves
    want_q, want_k = ref.rotary_embedding(pos.cpu().numpy(), before[:, :q_size].float().cpu().numpy(),
                                          before[:, q_size:q_size + k_size].float().cpu().numpy(),
                                          cache.float().cpu().numpy(), 64, is_neox)
    after = qkv.float().cpu().numpy()
    assert ref.relative_error(after[:, :q_size], want_q) < ref.TOLERANCE[dtype]
    assert ref.relative_error(after[:, q_size:q_size + k_size], want_k) < ref.TOLERANCE[dtype]
    # The value columns, which no view covers, are untouched.
    torch.testing.assert_close(qkv[:, q_size + k_size:], before[:, q_size + k_size:], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("is_neox", [True, False])
def test_torch_updates_the_qkv_tensor_through_its_views(rng, dtype, is_neox):
    check_views_update_qkv(rng, dtype, "cpu", is_neox)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("is_neox", [True, False])
def test_torch_updates_the_qkv_tensor_through_its_views_on_cuda(rng, dtype, is_neox):
    check_views_update_qkv(rng, dtype, "cuda", is_neox)


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("is_neox", [True, False])
def test_jax_cuda_body_matches_the_cpu_body(rng, dtype, is_neox):
    pos, query, key, cache = problem(rng, dtype, n=300, heads=32, kv_heads=8, head_size=128, rot=128, positions=4096)
    f = jax.jit(lambda *a: jops.rotary_embedding(*a, head_size=128, is_neox=is_neox))
    on_gpu = f(*(jax.device_put(x, gpu_devices()[0]) for x in (pos, query, cache, key)))
    on_cpu = f(*(jax.device_put(x, CPU) for x in (pos, query, cache, key)))
    for g, c in zip(on_gpu, on_cpu):
        assert ref.relative_error(g, np.asarray(c, np.float64)) < ref.TOLERANCE[dtype]


def test_a_view_that_reaches_into_the_other_is_refused(rng):
    qkv, q_size, k_size, pos, cache = qkv_views(rng, "float32", "cpu")
    with pytest.raises(RuntimeError, match=r"rotary_embedding: input 'key' shares memory with input 'query', which "
                                           r"the op updates in place"):
        tops.rotary_embedding(pos, qkv[:, :q_size + 1], cache, qkv[:, q_size:q_size + k_size], head_size=64)


def test_a_view_with_a_strided_last_dimension_is_refused(rng):
    qkv, q_size, k_size, pos, cache = qkv_views(rng, "float32", "cpu")
    with pytest.raises(RuntimeError, match=r"input 'query' has stride 2 in its last dimension; its spec layout "
                                           r"`rows` needs that dimension contiguous"):
        tops.rotary_embedding(pos, qkv[:, :2 * q_size:2], cache, qkv[:, q_size * 2:q_size * 2 + k_size], head_size=64)


CONSTRAINTS = [
    (dict(head_size=48), r"the spec requires QD % head_size == 0, but QD = 256, head_size = 48"),
    (dict(head_size=16), r"the spec requires R <= head_size, but R = 32, head_size = 16"),
]


@pytest.mark.parametrize("attrs, message", CONSTRAINTS)
def test_constraints_are_checked_by_every_entry_point(rng, attrs, message):
    pos, query, key, cache = problem(rng, "float32")
    with pytest.raises(ValueError, match=message):
        jops.rotary_embedding(pos, query, cache, key, **attrs)
    t = [torch.from_numpy(x) for x in (pos, query, cache, key)]
    with pytest.raises(RuntimeError, match=message):  # the C++ kernel
        tops.rotary_embedding(*t, **attrs)
    with pytest.raises(Exception, match=message):  # the fake kernel (torch.compile, meta tensors)
        tops.rotary_embedding(*(x.to("meta") for x in t), **attrs)
    # A raw typed-FFI call, past the wrapper's checks.
    call = jax.ffi.ffi_call("opgen_ops_rotary_embedding_ffi",
                            (jax.ShapeDtypeStruct(query.shape, jnp.float32), jax.ShapeDtypeStruct(key.shape, jnp.float32)),
                            input_output_aliases={1: 0, 3: 1})
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(call(pos, query, cache, key, head_size=np.int64(attrs["head_size"]), is_neox=True,
                                   present_=np.int64(1)))


def test_an_odd_rotary_dimension_is_refused(rng):
    pos, query, key, cache = problem(rng, "float32")
    with pytest.raises(ValueError, match=r"the spec requires R % 2 == 0, but R = 31"):
        jops.rotary_embedding(pos, query, cache[:, :31], key, head_size=64)


@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_without_a_key_rotates_the_query_alone(rng, api_version):
    pos, query, key, cache = problem(rng, "float32")
    q, k = jax.jit(lambda *a: jops.rotary_embedding(*a, head_size=64, api_version=api_version))(pos, query, cache)
    assert k is None
    want_q, _ = ref.rotary_embedding(pos, query, key, cache, 64)
    assert ref.relative_error(q, want_q) < ref.TOLERANCE["float32"]


def test_torch_without_a_key_rotates_the_query_alone(rng):
    qkv, q_size, k_size, pos, cache = qkv_views(rng, "float32", "cpu")
    before = qkv.clone()
    q, k = tops.rotary_embedding(pos, qkv[:, :q_size], cache, head_size=64)
    assert k is None
    want_q, _ = ref.rotary_embedding(pos.numpy(), before[:, :q_size].numpy(), before[:, q_size:q_size + k_size].numpy(),
                                     cache.numpy(), 64)
    assert ref.relative_error(qkv[:, :q_size].numpy(), want_q) < ref.TOLERANCE["float32"]
    torch.testing.assert_close(qkv[:, q_size:], before[:, q_size:], rtol=0, atol=0)  # the key is untouched
    # The C++ kernel takes None for the key (torch.ops directly), and so does the fake kernel.
    torch.ops.opgen_ops.rotary_embedding(pos, qkv[:, :q_size], cache, None, head_size=64)
    torch.ops.opgen_ops.rotary_embedding(pos.to("meta"), qkv[:, :q_size].to("meta"), cache.to("meta"), None,
                                         head_size=64)


def too_wide_for_shared_memory():
    """A rotary dimension whose angles need more than the 48 KiB of shared
    memory the CUDA body asks for: the body refuses it with a Status."""
    r = 12290
    pos = np.zeros(2, np.int32)
    query = np.ones((2, r), np.float32)
    cache = np.ones((1, r), np.float32)
    return pos, query, cache, r


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
def test_a_cuda_body_s_error_reaches_the_torch_caller():
    pos, query, cache, r = too_wide_for_shared_memory()
    with pytest.raises(RuntimeError, match="R of 12290 needs more than 48 KiB of shared memory"):
        tops.rotary_embedding(*(torch.from_numpy(a).cuda() for a in (pos, query, cache)), head_size=r)
        torch.cuda.synchronize()


@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("api_version", [4, 3])
def test_a_cuda_body_s_error_reaches_the_jax_caller(api_version):
    pos, query, cache, r = too_wide_for_shared_memory()
    f = jax.jit(lambda *a: jops.rotary_embedding(*a, head_size=r, api_version=api_version))
    args = [jax.device_put(a, gpu_devices()[0]) for a in (pos, query, cache)]
    if api_version == 4:
        with pytest.raises(Exception, match="R of 12290 needs more than 48 KiB of shared memory"):
            jax.block_until_ready(f(*args))
    else:  # jaxlib exports no XlaCustomCallStatusSetFailure: stderr, and the outputs poisoned
        query_out, key_out = f(*args)
        assert key_out is None and np.isnan(np.asarray(query_out)).all()


def test_torch_compile_fullgraph_updates_the_qkv_views(rng):
    qkv, q_size, k_size, pos, cache = qkv_views(rng, "float32", "cpu")
    before = qkv.clone()

    def step(qkv, pos, cache):
        query, key = qkv[:, :q_size], qkv[:, q_size:q_size + k_size]
        tops.rotary_embedding(pos, query, cache, key, head_size=64)
        return qkv.sum()

    total = torch.compile(step, fullgraph=True)(qkv, pos, cache)
    want_q, want_k = ref.rotary_embedding(pos.numpy(), before[:, :q_size].numpy(), before[:, q_size:q_size + k_size].numpy(),
                                          cache.numpy(), 64, True)
    assert ref.relative_error(qkv[:, :q_size].numpy(), want_q) < ref.TOLERANCE["float32"]
    assert ref.relative_error(qkv[:, q_size:q_size + k_size].numpy(), want_k) < ref.TOLERANCE["float32"]
    torch.testing.assert_close(total, qkv.sum(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_donated_query_and_key_are_updated_without_a_copy(rng, api_version):
    pos, query, key, cache = problem(rng, "float32")
    f = jax.jit(lambda p, q, c, k: jops.rotary_embedding(p, q, c, k, head_size=64, api_version=api_version),
                donate_argnums=(1, 3))
    args = [jax.device_put(a, CPU) for a in (pos, query, cache, key)]
    hlo = f.lower(*args).compile().as_text()
    assert "copy(" not in hlo and "copy-start" not in hlo, hlo
    q, k = f(*args)
    assert args[1].is_deleted() and args[3].is_deleted()
    want_q, want_k = ref.rotary_embedding(pos, query, key, cache, 64, True)
    assert ref.relative_error(q, want_q) < ref.TOLERANCE["float32"]
    assert ref.relative_error(k, want_k) < ref.TOLERANCE["float32"]
