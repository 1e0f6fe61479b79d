"""moe_align_block_size, vLLM's grouping of a MoE layer's token-expert pairs
by expert: outputs sized by integer attributes, an index input's range
(entries outside [0, num_experts) placed nowhere), and an output whose order
within each expert's group is unspecified (atomics on CUDA). Against an
independent numpy reference, comparing each group as a set and everything
else exactly: torch eager (direct and torch.ops), torch.compile, opcheck, JAX
eager and jit (both api_versions); N = 0, one entry per block, more experts
than the CUDA body's scan takes in one round; CUDA variants skip without a
GPU."""

import jax
import numpy as np
import pytest
import torch

import opgen_ops.jax as jops
import opgen_ops.torch as tops
from conftest import gpu_devices
from torch_arrays import as_numpy

CPU = jax.devices("cpu")[0]
requires_torch_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
requires_jax_gpu = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


def reference(ids, num_experts, block_size):
    """(each expert's group of flat indices in index order, its offset, expert_ids, the padded total)."""
    flat = np.asarray(ids).reshape(-1)
    groups, offsets, offset = [], [], 0
    size = flat.size + num_experts * (block_size - 1)
    expert_ids = np.full(-(-size // block_size), -1, np.int32)
    for e in range(num_experts):
        group = np.flatnonzero(flat == e)
        padded = -(-group.size // block_size) * block_size
        groups.append(group)
        offsets.append(offset)
        expert_ids[offset // block_size:(offset + padded) // block_size] = e
        offset += padded
    return groups, offsets, expert_ids, offset


def assert_aligned(got, ids, num_experts, block_size, where=""):
    sorted_ids, expert_ids, total = (as_numpy(g) for g in got)
    groups, offsets, want_experts, want_total = reference(ids, num_experts, block_size)
    entries = np.asarray(ids).size
    assert sorted_ids.dtype == expert_ids.dtype == total.dtype == np.int32, where
    assert sorted_ids.shape == (entries + num_experts * (block_size - 1),), where
    assert total.shape == (1,) and total[0] == want_total, where
    np.testing.assert_array_equal(expert_ids, want_experts, err_msg=where)
    padding = np.ones(sorted_ids.size, bool)
    for group, offset in zip(groups, offsets):
        # The order within a group is unspecified: compared as a set.
        np.testing.assert_array_equal(np.sort(sorted_ids[offset:offset + group.size]), group, err_msg=where)
        padding[offset:offset + group.size] = False
    np.testing.assert_array_equal(sorted_ids[padding], entries, err_msg=where)


def draw(rng, dtype=np.int32, *, n=None, k=None, num_experts=None, block_size=None, outside=0.0):
    """topk_ids of n tokens choosing k experts each (distinct per token, as a
    router chooses them), a share `outside` of them replaced by -1 or
    num_experts (experts held elsewhere)."""
    num_experts = num_experts or int(rng.choice([1, 4, 8, 60, 256]))
    k = k or int(rng.integers(1, min(num_experts, 8) + 1))
    n = int(rng.integers(1, 80)) if n is None else n
    block_size = block_size or int(rng.choice([1, 4, 16, 64]))
    ids = np.stack([rng.choice(num_experts, size=k, replace=False) for _ in range(n)]) if n else np.zeros((0, k))
    ids = ids.astype(dtype)
    away = rng.random(ids.shape) < outside
    ids[away] = rng.choice([-1, num_experts], size=int(away.sum()))
    return ids, num_experts, block_size


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_torch_matches_the_reference(rng, dtype):
    for _ in range(8):
        ids, e, b = draw(rng, dtype)
        t = torch.from_numpy(ids)
        assert_aligned(tops.moe_align_block_size(t, num_experts=e, block_size=b), ids, e, b, "direct")
        assert_aligned(torch.ops.opgen_ops.moe_align_block_size(t, num_experts=e, block_size=b), ids, e, b,
                       "torch.ops")


@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_jax_matches_the_reference(rng, dtype, api_version):
    if dtype == np.int64 and not jax.config.jax_enable_x64:
        pytest.skip("int64 arrays need jax_enable_x64")
    for _ in range(4):
        ids, e, b = draw(rng, dtype)
        f = lambda x: jops.moe_align_block_size(x, num_experts=e, block_size=b, api_version=api_version)  # noqa: E731
        x = jax.device_put(ids, CPU)
        assert_aligned(jax.jit(f)(x), ids, e, b, "jit")
        assert_aligned(f(x), ids, e, b, "eager")


def test_the_cpu_body_keeps_index_order_within_a_group(rng):
    ids, e, b = draw(rng, n=50, num_experts=8, block_size=16)
    sorted_ids, _, _ = tops.moe_align_block_size(torch.from_numpy(ids), num_experts=e, block_size=b)
    groups, offsets, _, _ = reference(ids, e, b)
    for group, offset in zip(groups, offsets):
        np.testing.assert_array_equal(sorted_ids.numpy()[offset:offset + group.size], group)


def test_entries_outside_the_experts_are_placed_nowhere(rng):
    ids, e, b = draw(rng, n=64, num_experts=16, block_size=4, outside=0.3)
    assert ((ids < 0) | (ids >= e)).any()
    assert_aligned(tops.moe_align_block_size(torch.from_numpy(ids), num_experts=e, block_size=b), ids, e, b)
    assert_aligned(jops.moe_align_block_size(ids, num_experts=e, block_size=b), ids, e, b)


def test_no_tokens_gives_all_padding():
    ids = np.zeros((0, 2), np.int32)
    for got in (tops.moe_align_block_size(torch.from_numpy(ids), num_experts=4, block_size=8),
                jops.moe_align_block_size(ids, num_experts=4, block_size=8)):
        sorted_ids, expert_ids, total = (as_numpy(g) for g in got)
        np.testing.assert_array_equal(sorted_ids, np.zeros(4 * 7, np.int32))  # the padding index N*K = 0
        np.testing.assert_array_equal(expert_ids, np.full(4, -1, np.int32))
        np.testing.assert_array_equal(total, [0])


def test_refusals():
    # torch's kernels raise RuntimeError (a ValueError or TypeError under it from the wrappers' own checks);
    # JAX raises ValueError and TypeError.
    ids = np.zeros((3, 2), np.int32)
    t = torch.from_numpy(ids)
    for call, kind in ((lambda **a: tops.moe_align_block_size(t, **a), RuntimeError),
                       (lambda **a: jops.moe_align_block_size(ids, **a), ValueError)):
        with pytest.raises(kind, match=r"attribute 'block_size' = 0 must be >= 1"):
            call(num_experts=4, block_size=0)
        with pytest.raises(kind, match=r"attribute 'num_experts' = 0 must be >= 1"):
            call(num_experts=0, block_size=4)
        with pytest.raises(kind, match=r"N\*K \+ num_experts\*block_size <= 2147483647"):
            call(num_experts=2**30, block_size=4)
    with pytest.raises(RuntimeError, match="topk_ids"):
        tops.moe_align_block_size(t.float(), num_experts=4, block_size=4)
    with pytest.raises(TypeError, match="topk_ids"):
        jops.moe_align_block_size(ids.astype(np.float32), num_experts=4, block_size=4)


def test_torch_compile_and_opcheck(rng):
    ids, e, b = draw(rng)
    f = torch.compile(lambda x: torch.ops.opgen_ops.moe_align_block_size(x, num_experts=e, block_size=b),
                      fullgraph=True)
    assert_aligned(f(torch.from_numpy(ids)), ids, e, b, "compile")
    # The CPU body's order is deterministic, so opcheck's comparison of eager and traced outputs holds.
    torch.library.opcheck(torch.ops.opgen_ops.moe_align_block_size.default, (torch.from_numpy(ids),),
                          {"num_experts": e, "block_size": b})


# --- CUDA: the order within a group is that of the atomics ------------------------------------


@requires_torch_cuda
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_torch_cuda_matches_the_reference(rng, dtype):
    cases = [draw(rng, dtype) for _ in range(6)]
    cases += [draw(rng, dtype, n=4096, k=8, num_experts=256, block_size=64, outside=0.05),  # a prefill
              draw(rng, dtype, n=300, k=2, num_experts=3000, block_size=1),  # experts > one scan round
              draw(rng, dtype, n=0, k=2, num_experts=8, block_size=16)]
    for ids, e, b in cases:
        got = tops.moe_align_block_size(torch.from_numpy(ids).cuda(), num_experts=e, block_size=b)
        assert all(g.is_cuda for g in got)
        assert_aligned(got, ids, e, b, f"cuda N*K={ids.size} E={e} block={b}")


@requires_torch_cuda
def test_torch_cuda_opcheck_without_comparing_eager_and_traced(rng):
    # The order of sorted_token_ids is the atomics': an eager call and a traced one may differ there.
    ids, e, b = draw(rng, n=512, k=4, num_experts=16, block_size=16)
    utils = tuple(u for u in torch.library.opcheck.__kwdefaults__["test_utils"] if u != "test_aot_dispatch_dynamic")
    torch.library.opcheck(torch.ops.opgen_ops.moe_align_block_size.default, (torch.from_numpy(ids).cuda(),),
                          {"num_experts": e, "block_size": b}, test_utils=utils)


@requires_jax_gpu
def test_jax_gpu_matches_the_reference(rng):
    gpu = gpu_devices()[0]
    for _ in range(4):
        ids, e, b = draw(rng, outside=0.1)
        got = jax.jit(lambda x, e=e, b=b: jops.moe_align_block_size(x, num_experts=e, block_size=b))(
            jax.device_put(ids, gpu))
        assert_aligned(got, ids, e, b, "jax gpu")
