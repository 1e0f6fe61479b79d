"""merge_attn_states, vLLM's merge of two partial attention results by their
log-sum-exps: against a float64 numpy reference through JAX and PyTorch, with
output_lse asked for and not; lse that are -inf or +inf (an empty prefix, an
empty suffix as FlashAttention 2 reports one, both: the prefix's output and
-inf, as the spec says); lse far from 0 (the maximum subtracted before exp);
no tokens; rows of no elements (output_lse alone); opcheck and
torch.compile. On a GPU, the CUDA body's 16-byte vectors and its element path
(D no multiple of the vector, unaligned tensors); skipped without one.
Gradients: the op has no backward (test_no_backward.py holds it to that)."""

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


def reference(prefix_output, prefix_lse, suffix_output, suffix_lse):
    """The merge in float64, as the spec's doc states it: +inf lse count as
    -inf; where both are -inf, the prefix's output and an lse of -inf."""
    p, s = (np.asarray(x, np.float64) for x in (prefix_lse, suffix_lse))
    p, s = (np.where(x == np.inf, -np.inf, x) for x in (p, s))
    m = np.maximum(p, s)  # [H, N]
    empty = m == -np.inf
    shift = np.where(empty, 0.0, m)
    a, b = np.exp(p - shift), np.exp(s - shift)  # both 0 where empty
    total = np.where(empty, 1.0, a + b)
    wa, wb = (w.T[..., None] for w in (a / total, b / total))  # [N, H, 1]
    po, so = (np.asarray(x, np.float64) for x in (prefix_output, suffix_output))
    out = np.where(empty.T[..., None], po, wa * po + wb * so)
    lse = np.where(empty, -np.inf, np.log(total) + shift)
    return out, lse


def problem(rng, dtype, n=6, h=4, d=64, centre=0.0):
    """Outputs of unit scale; lse of spread 3 around `centre`."""
    po, so = (rng.standard_normal((n, h, d)).astype(DTYPES[dtype]) for _ in range(2))
    pl, sl = ((centre + 3 * rng.standard_normal((h, n))).astype(np.float32) for _ in range(2))
    return po, pl, so, sl


def with_empty_parts(rng, dtype, n=12, h=4, d=64):
    """Tokens 0-2 have an empty prefix (-inf in every head, as a request
    without a cached prefix), 3-5 an empty suffix given as +inf
    (FlashAttention 2), 6-8 both empty (-inf with -inf, +inf with -inf,
    +inf with +inf); single heads of 9-11 are empty in one part or both."""
    po, pl, so, sl = problem(rng, dtype, n, h, d)
    pl[:, 0:3] = -np.inf
    sl[:, 3:6] = np.inf
    pl[:, 6], sl[:, 6] = -np.inf, -np.inf
    pl[:, 7], sl[:, 7] = np.inf, -np.inf
    pl[:, 8], sl[:, 8] = np.inf, np.inf
    pl[0, 9], sl[1, 10] = -np.inf, np.inf
    pl[2, 11], sl[2, 11] = -np.inf, np.inf
    return po, pl, so, sl


def check(got_out, got_lse, p, dtype, asked=True):
    want_out, want_lse = reference(*p)
    got_out = as_numpy(got_out).astype(np.float64)
    assert got_out.shape == want_out.shape
    assert ref.relative_error(got_out, want_out) < ref.TOLERANCE[dtype]
    empty = np.isinf(want_lse).T  # [N, H]: the rows that are the prefix's output, exactly
    np.testing.assert_array_equal(got_out[empty], np.asarray(p[0], np.float64)[empty])
    if not asked:
        assert got_lse is None
        return
    got_lse = as_numpy(got_lse)
    assert got_lse.dtype == np.float32 and got_lse.shape == want_lse.shape
    np.testing.assert_array_equal(np.isneginf(got_lse), np.isneginf(want_lse))
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(got_lse[finite], want_lse[finite], rtol=1e-5, atol=1e-5)


def jax_call(p, asked=True, api_version=4, device=CPU):
    f = jax.jit(lambda *a: jops.merge_attn_states(*a, return_output_lse=asked, api_version=api_version))
    return f(*(jax.device_put(a, device) for a in p))


def torch_call(p, asked=True, device="cpu"):
    return tops.merge_attn_states(*(to_torch(a, device) for a in p), return_output_lse=asked)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("asked", [True, False])
def test_jax_matches_the_reference(rng, dtype, api_version, asked):
    p = problem(rng, dtype)
    check(*jax_call(p, asked, api_version), p, dtype, asked)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("asked", [True, False])
def test_torch_matches_the_reference(rng, dtype, asked):
    p = problem(rng, dtype, n=9, h=3, d=80)
    check(*torch_call(p, asked), p, dtype, asked)


def test_torch_ops_gives_an_empty_lse_when_not_asked(rng):
    p = problem(rng, "float32")
    out, lse = torch.ops.opgen_ops.merge_attn_states(*(to_torch(a) for a in p))
    assert lse.shape == (0,) and lse.dtype == torch.float32
    check(out, None, p, "float32", asked=False)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_infinite_lse_mark_empty_parts(rng, dtype):
    p = with_empty_parts(rng, dtype)
    check(*torch_call(p), p, dtype)
    check(*jax_call(p), p, dtype)
    check(*jax_call(p, api_version=3), p, dtype)


def test_lse_far_from_zero_are_merged_without_overflow(rng):
    """exp(lse) overflows f32 beyond 88: the maximum is subtracted first."""
    for centre in (300.0, -300.0):
        p = problem(rng, "float32", centre=centre)
        check(*torch_call(p), p, "float32")
        check(*jax_call(p), p, "float32")


def test_no_tokens(rng):
    p = problem(rng, "bfloat16", n=0)
    for out, lse in (torch_call(p), jax_call(p)):
        assert tuple(out.shape) == (0, 4, 64) and tuple(lse.shape) == (4, 0)


def test_rows_of_no_elements_still_merge_the_lse(rng):
    p = problem(rng, "float16", n=5, h=3, d=0)
    p[1][0, 1] = -np.inf  # one head of one token with an empty prefix
    for out, lse in (torch_call(p), jax_call(p)):
        assert tuple(out.shape) == (5, 3, 0)
        np.testing.assert_allclose(as_numpy(lse), reference(*p)[1], rtol=1e-5, atol=1e-5)


def test_an_lse_in_tokens_major_layout_is_refused(rng):
    """vLLM's lse are [H, N]: an [N, H] one (N != H) names the input and the shape."""
    po, pl, so, sl = problem(rng, "float32", n=6, h=4)
    with pytest.raises(RuntimeError, match=r"merge_attn_states: input 'prefix_lse'.*\[H, N\]"):
        torch_call((po, pl.T.copy(), so, sl))
    with pytest.raises(ValueError, match=r"merge_attn_states: input 'suffix_lse'.*\[H, N\]"):
        jax_call((po, pl, so, sl.T.copy()))


@pytest.mark.parametrize("asked", [True, False])
def test_torch_opcheck(rng, asked):
    p = problem(rng, "bfloat16", n=5, h=2, d=16)
    torch.library.opcheck(torch.ops.opgen_ops.merge_attn_states.default, tuple(to_torch(a) for a in p),
                          {"return_output_lse": asked})


def test_torch_compile_fullgraph_matches_the_reference(rng):
    p = problem(rng, "float32")
    f = torch.compile(lambda *a: tuple(x * 2 for x in tops.merge_attn_states(*a, return_output_lse=True)),
                      fullgraph=True)
    out, lse = f(*(to_torch(a) for a in p))
    check(out / 2, lse / 2, p, "float32")


# --- GPU --------------------------------------------------------------------------------------

needs_torch_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
needs_jax_gpu = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


@needs_torch_cuda
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("d", [128, 576, 36, 3])  # 16-byte vectors (MLA's 576 too); D no multiple of the vector
@pytest.mark.parametrize("asked", [True, False])
def test_torch_cuda_matches_the_reference(rng, dtype, d, asked):
    p = problem(rng, dtype, n=300, h=8, d=d)
    check(*torch_call(p, asked, "cuda"), p, dtype, asked)


@needs_torch_cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_cuda_infinite_lse_and_rows_of_no_elements(rng, dtype):
    p = with_empty_parts(rng, dtype, d=128)
    check(*torch_call(p, device="cuda"), p, dtype)
    p = problem(rng, dtype, n=700, h=3, d=0)  # output_lse alone: its own kernel
    np.testing.assert_allclose(as_numpy(torch_call(p, device="cuda")[1]), reference(*p)[1], rtol=1e-5, atol=1e-5)
    for d in (128, 0):  # no token: nothing to launch (a grid of no block is a CUDA error)
        out, lse = torch_call(problem(rng, dtype, n=0, d=d), device="cuda")
        torch.cuda.synchronize()
        assert tuple(out.shape) == (0, 4, d) and tuple(lse.shape) == (4, 0)


@needs_torch_cuda
@pytest.mark.parametrize("which", [0, 2])
def test_torch_cuda_inputs_that_are_not_16_byte_aligned(rng, which):
    """Contiguous inputs one element into their storage: the element path."""
    p = problem(rng, "float16", n=40, h=8, d=128)
    tensors = [to_torch(a, "cuda") for a in p]
    shifted = torch.empty(tensors[which].numel() + 1, dtype=torch.float16, device="cuda")[1:]
    shifted = shifted.view(tensors[which].shape)
    shifted.copy_(tensors[which])
    assert shifted.data_ptr() % 16 != 0
    tensors[which] = shifted
    check(*tops.merge_attn_states(*tensors, return_output_lse=True), p, "float16")


@needs_jax_gpu
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_cuda_matches_the_reference(rng, dtype, api_version):
    p = with_empty_parts(rng, dtype, n=64, h=8, d=128)
    check(*jax_call(p, api_version=api_version, device=gpu_devices()[0]), p, dtype)
    check(*jax_call(p, False, api_version, gpu_devices()[0]), p, dtype, asked=False)
