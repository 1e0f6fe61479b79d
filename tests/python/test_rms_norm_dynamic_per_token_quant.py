"""rms_norm_dynamic_per_token_quant, vLLM's residual add (optional, in place),
RMS norm and per-token quantisation to fp8 e4m3fn or int8 (the caller's
out_dtype) in one op. Against a float64 numpy reference that rounds where the
op's doc says it does (op_references): the scales to f32's rounding, each
quantised value within one step of the reference's y / scale (so the
dequantised out * scale within one step of y), the new residual exactly; for
every T and out_dtype, with residual and without, scale_ub as [], as [1] and
not given: torch eager (residual updated in place), torch.ops,
torch.compile, JAX jit on both api_versions (residual returned updated, the
caller's array untouched); no tokens; opcheck; the refusal of a residual that
shares memory with x; constants under differentiation. CUDA variants (rows
held in registers, rows read from memory, rows not on 16 bytes, strided
rows; the CUDA body against the CPU body, bit for bit) skip without a GPU."""

import itertools

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
from torch_arrays import as_numpy, to_torch

CPU = jax.devices("cpu")[0]
IN_DTYPES = ["float16", "bfloat16", "float32"]
OUT_DTYPES = ["float8_e4m3fn", "int8"]
NUMPY = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
TORCH = {"float8_e4m3fn": torch.float8_e4m3fn, "int8": torch.int8}
EPS = 1e-5
op_jax = jops.rms_norm_dynamic_per_token_quant
op_torch = tops.rms_norm_dynamic_per_token_quant
requires_torch_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
requires_jax_gpu = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


def problem(rng, shape, dtype, residual=True):
    """Rows of differing magnitudes (times 2^k, k in [-4, 4]), a weight
    around 1, and a residual of another magnitude where asked."""
    def rows():
        return rng.standard_normal(shape) * np.exp2(rng.uniform(-4, 4, shape[:-1] + (1,)))
    x = rows().astype(NUMPY[dtype])
    weight = rng.uniform(0.5, 1.5, shape[-1]).astype(NUMPY[dtype])
    return x, weight, rows().astype(NUMPY[dtype]) if residual else None


def bounds(x, weight, residual, dtype):
    """scale_ub as none, as [] and as [1]: a bound below most rows' max |y|,
    so that it saturates some."""
    _, _, _, y, _ = ref.rms_norm_dynamic_per_token_quant(x, weight, EPS, "int8", residual)
    ub = np.float32(np.median(np.abs(y).max(-1)) if y.size else 1.0)
    return {"none": None, "[]": np.asarray(ub), "[1]": np.asarray([ub])}


def step(q, out_dtype):
    """One quantisation step at each reference value q."""
    return np.ones_like(q) if out_dtype == "int8" else ref.fp8_ulp(q, out_dtype)


def check(got, x, weight, residual, out_dtype, scale_ub=None, where=""):
    """The op's (out, scale, residual_out) against the reference."""
    out, scale, residual_out = got
    want, q, want_scale, _, want_residual = ref.rms_norm_dynamic_per_token_quant(x, weight, EPS, out_dtype, residual,
                                                                                scale_ub)
    assert str(out.dtype).removeprefix("torch.") == out_dtype, where
    assert str(scale.dtype).removeprefix("torch.") == "float32", where
    out, scale = as_numpy(out).astype(np.float64), as_numpy(scale).astype(np.float64)
    assert out.shape == x.shape and scale.shape == x.shape[:-1], where
    np.testing.assert_allclose(scale, want_scale, rtol=2e-7, atol=0, err_msg=where)
    # Dequantised: out * scale within one step (times the scale) of y / scale
    # saturated to out_dtype's range, times the scale.
    off = np.abs(out * scale[..., None] - q * scale[..., None]) / (step(q, out_dtype) * scale[..., None])
    assert np.all(off <= 1), f"{where}: {np.max(off):.3g} steps off"
    # And rounded as the doc says, bit for bit.
    np.testing.assert_array_equal(out, want, err_msg=where)
    if residual is None:
        assert residual_out is None, where
    else:
        np.testing.assert_array_equal(as_numpy(residual_out).astype(np.float64),
                                      want_residual.astype(np.float64), err_msg=where)


# --- CPU --------------------------------------------------------------------------------------------


def torch_routes(out_dtype):
    """The op through the wrapper (its direct route) and torch.ops, each
    returning (out, scale, residual)."""
    return {
        "wrapper": lambda *a: op_torch(*a, eps=EPS, out_dtype=TORCH[out_dtype]),
        "torch.ops": lambda *a: torch.ops.opgen_ops.rms_norm_dynamic_per_token_quant(
            *a, eps=EPS, out_dtype=TORCH[out_dtype]) + (a[3],),
    }


def check_torch(f, x, weight, residual, out_dtype, ub, where):
    """f's results against the reference; residual is updated in place (the
    tensor returned is the caller's), x is left as it was."""
    xt, wt, ubt, rt = (to_torch(a) for a in (x, weight, ub, residual))
    got = f(xt, wt, ubt, rt)
    check(got, x, weight, residual, out_dtype, ub, where)
    if residual is not None:
        assert got[2].data_ptr() == rt.data_ptr(), where
        np.testing.assert_array_equal(as_numpy(rt), as_numpy(got[2]), err_msg=where)
    np.testing.assert_array_equal(as_numpy(xt), as_numpy(to_torch(x)), err_msg=where)


@pytest.mark.parametrize("in_dtype", IN_DTYPES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_torch_against_the_reference(rng, in_dtype, out_dtype):
    for with_residual in (True, False):
        x, weight, residual = problem(rng, (3, 5, 96), in_dtype, with_residual)
        for name, ub in bounds(x, weight, residual, in_dtype).items():
            for route, f in torch_routes(out_dtype).items():
                check_torch(f, x, weight, residual, out_dtype, ub, f"{route}, residual {with_residual}, scale_ub {name}")


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_torch_compile_against_the_reference(rng, out_dtype):
    torch._dynamo.reset()  # a graph for each call below: more than the recompile limit over both out_dtypes
    compiled = torch.compile(lambda *a: op_torch(*a, eps=EPS, out_dtype=TORCH[out_dtype]), fullgraph=True)
    for with_residual, name in itertools.product((True, False), ("none", "[1]")):
        x, weight, residual = problem(rng, (7, 64), "bfloat16", with_residual)
        ub = bounds(x, weight, residual, "bfloat16")[name]
        check_torch(compiled, x, weight, residual, out_dtype, ub, f"residual {with_residual}, scale_ub {name}")


@pytest.mark.parametrize("in_dtype", IN_DTYPES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_jit_against_the_reference(rng, in_dtype, out_dtype, api_version):
    """JAX returns the new residual; the caller's array is left as it was."""
    f = jax.jit(lambda *a: op_jax(*a, eps=EPS, out_dtype=getattr(jnp, out_dtype), api_version=api_version))
    for with_residual in (True, False):
        x, weight, residual = problem(rng, (4, 130), in_dtype, with_residual)
        kept = None if residual is None else residual.copy()
        for name, ub in bounds(x, weight, residual, in_dtype).items():
            args = [None if a is None else jax.device_put(a, CPU) for a in (x, weight, ub, residual)]
            check(f(*args), x, weight, residual, out_dtype, ub, f"residual {with_residual}, scale_ub {name}")
            if residual is not None:
                np.testing.assert_array_equal(np.asarray(args[3]), kept)


def test_the_default_out_dtype_is_e4m3fn_and_the_name_is_taken(rng):
    x, weight, _ = problem(rng, (2, 16), "float32", residual=False)
    assert op_jax(x, weight)[0].dtype == jnp.float8_e4m3fn
    assert op_torch(to_torch(x), to_torch(weight))[0].dtype == torch.float8_e4m3fn
    assert op_torch(to_torch(x), to_torch(weight), out_dtype="int8")[0].dtype == torch.int8
    assert op_jax(x, weight, out_dtype="int8")[0].dtype == jnp.int8


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_a_row_of_zeros_gets_the_smallest_scale(rng, out_dtype):
    x, weight, _ = problem(rng, (3, 64), "bfloat16", residual=False)
    x[1] = 0
    for got in (op_jax(x, weight, eps=EPS, out_dtype=out_dtype),
                op_torch(to_torch(x), to_torch(weight), eps=EPS, out_dtype=TORCH[out_dtype])):
        assert as_numpy(got[1])[1] == np.float32(ref.QUANT8[out_dtype][1])
        assert not np.any(as_numpy(got[0])[1].astype(np.float32))
        check(got, x, weight, None, out_dtype)


def known_row(k):
    """A row whose y is known exactly: x = k * 2^14 with mean(k^2) = 4096
    (mean(x^2) = 2^40), so that rstd rounds to 2^-20 exactly (eps is far
    below f32's precision there) and, with the weight 1, y = k / 64."""
    k = np.asarray(k + [0.0] * (64 - len(k)))
    assert (k * k).sum() == 4096 * 64
    return (k * 2.0 ** 14)[None].astype(np.float32), np.ones(64, np.float32)


def int8_outputs(x, weight, ub):
    """out and scale of every route, scale_ub as [] and as [1]."""
    for ub_as in (np.asarray(ub, np.float32), np.asarray([ub], np.float32)):
        yield op_jax(x, weight, ub_as, out_dtype="int8")[:2]
        yield op_torch(to_torch(x), to_torch(weight), to_torch(ub_as), out_dtype=torch.int8)[:2]


def test_int8_rounds_halves_to_even_and_saturates():
    """scale_ub = 127 / 64, below max |y| = 3.125, makes the scale 1 / 64
    exactly, so y * (1 / scale) = k: halves go to the even neighbour, values
    past the range saturate to 127 and -128."""
    ties = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -127.5, 200.0, -200.0]
    whole = [64.0] * 36 + [49.0, 3.0, 1.0, 1.0]
    x, weight = known_row(ties + whole)
    want = [0, 2, 2, 0, -2, -2, 126, -128, 127, -128] + [int(v) for v in whole] + [0] * (64 - 50)
    for out, scale in int8_outputs(x, weight, 127 / 64):
        assert as_numpy(scale)[0] == np.float32(1 / 64)
        np.testing.assert_array_equal(as_numpy(out)[0], want)


def test_int8_multiplies_by_the_reciprocal_of_the_scale():
    """vLLM's int8 is y * (1 / scale), the reciprocal rounded to f32 first:
    with scale_ub = 1.125 (scale = 1.125 / 127 in f32), y = 36 / 64 gives
    63.5 exactly, which rounds to 64; y / scale would be 63.499996, 63."""
    x, weight = known_row([36.0, 100.0] + [80.0] * 39 + [35.0, 3.0, 3.0, 2.0, 1.0])
    scale = np.float32(1.125) / np.float32(127)
    assert np.rint(np.float32(36 / 64) / scale) == 63  # the value division would give
    for out, got_scale in int8_outputs(x, weight, 1.125):
        assert as_numpy(got_scale)[0] == scale
        assert as_numpy(out)[0, 0] == 64 and as_numpy(out)[0, 1] == 127


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_no_tokens(rng, out_dtype):
    """An empty batch: empty outputs, on every route, with the residual."""
    for shape in [(0, 32), (2, 0, 32)]:
        x, weight, residual = problem(rng, shape, "bfloat16")
        for got in (op_jax(x, weight, None, residual, out_dtype=out_dtype),
                    jax.jit(lambda *a: op_jax(*a, out_dtype=out_dtype, api_version=3))(x, weight, None, residual),
                    op_torch(to_torch(x), to_torch(weight), None, to_torch(residual), out_dtype=TORCH[out_dtype])):
            out, scale, residual_out = got
            assert tuple(out.shape) == shape and tuple(scale.shape) == shape[:-1]
            assert tuple(residual_out.shape) == shape


def test_opcheck(rng):
    overload = torch.ops.opgen_ops.rms_norm_dynamic_per_token_quant.default
    for in_dtype, out_dtype, with_residual, ub in itertools.product(IN_DTYPES, OUT_DTYPES, (True, False),
                                                                     ("none", "[]", "[1]")):
        x, weight, residual = problem(rng, (3, 40), in_dtype, with_residual)
        bound = bounds(x, weight, residual, in_dtype)[ub]
        torch.library.opcheck(overload, tuple(to_torch(a) for a in (x, weight, bound, residual)),
                              {"eps": EPS, "out_dtype": TORCH[out_dtype]})


def test_a_residual_that_shares_memory_with_x_is_refused(rng):
    """The op reads x while it writes residual: the same tensor, or rows of one
    buffer whose ranges meet, are refused (the eager route, torch.ops,
    torch.compile), and the residual is left as it was."""
    x, weight, _ = problem(rng, (5, 32), "float32", residual=False)
    w = to_torch(weight)
    same = to_torch(x)
    buf = to_torch(problem(rng, (6, 32), "float32", residual=False)[0])
    kept = buf.clone()
    message = (r"rms_norm_dynamic_per_token_quant: input 'x' shares memory with input 'residual', which the op "
               r"updates in place")
    for xt, rt in ((same, same), (buf[:-1], buf[1:])):
        with pytest.raises(RuntimeError, match=message):
            op_torch(xt, w, None, rt)
        with pytest.raises(RuntimeError, match=message):
            torch.ops.opgen_ops.rms_norm_dynamic_per_token_quant(xt, w, None, rt)
    with pytest.raises(Exception, match=message):
        torch.compile(lambda a, b: op_torch(a, w, None, b), fullgraph=True)(buf[:-1], buf[1:])
    assert torch.equal(buf, kept)


def test_a_residual_that_is_not_dense_is_refused(rng):
    """residual is updated in place and dense: an expanded (overlapping) or
    strided one is refused, not copied (the copy would take the update)."""
    x, weight, _ = problem(rng, (4, 16), "float32", residual=False)
    for residual in (torch.randn(1, 16).expand(4, 16), torch.randn(4, 32)[:, :16]):
        with pytest.raises(RuntimeError, match=r"rms_norm_dynamic_per_token_quant: input 'residual' is updated in "
                                               r"place, and the spec's layout for it is contiguous"):
            op_torch(to_torch(x), to_torch(weight), None, residual)


def test_x_may_be_a_row_view(rng):
    """x takes a view with a row stride (vLLM's input_stride): the result is
    that of a dense copy."""
    x, weight, residual = problem(rng, (6, 48), "bfloat16")
    wide = torch.zeros(6, 64, dtype=torch.bfloat16)
    wide[:, 8:56] = to_torch(x)
    view = wide[:, 8:56]
    got = op_torch(view, to_torch(weight), None, to_torch(residual), eps=EPS, out_dtype=torch.int8)
    check(got, x, weight, residual, "int8")


def test_outputs_are_constants_under_differentiation(rng):
    x, weight, residual = problem(rng, (3, 16), "float32")
    g = jax.grad(lambda x: jnp.sum(op_jax(x, weight, None, residual)[1]))(x)
    assert not np.any(np.asarray(g))
    xt = to_torch(x).requires_grad_()
    for got in (op_torch(xt, to_torch(weight)), op_torch(xt, to_torch(weight), None, to_torch(residual))):
        assert not any(t is not None and t.requires_grad for t in got)


def test_a_residual_in_a_graph_gets_no_gradient_through_the_op(rng):
    """residual's new value is a constant too: a residual that requires grad
    (not a leaf) holds the sum after the call and passes no gradient back
    through it, as JAX's stop_gradient gives none; a leaf that requires grad
    is refused before anything is written (torch refuses an in-place update
    of one), and runs under torch.no_grad()."""
    x, weight, residual = problem(rng, (3, 16), "float32")
    _, _, _, _, want_residual = ref.rms_norm_dynamic_per_token_quant(x, weight, EPS, "int8", residual)
    leaf = to_torch(residual).requires_grad_()
    r = leaf * 1
    _, scale, r_out = op_torch(to_torch(x), to_torch(weight), None, r, eps=EPS, out_dtype=torch.int8)
    assert r_out is r
    np.testing.assert_array_equal(as_numpy(r_out), want_residual)
    (r_out.sum() * 3 + scale.sum() + (leaf * 2).sum()).backward()
    np.testing.assert_array_equal(as_numpy(leaf.grad), np.full(residual.shape, 2.0, np.float32))
    grad = jax.grad(lambda r: (op_jax(x, weight, None, r, eps=EPS)[2] * 3).sum() + (r * 2).sum())(residual)
    np.testing.assert_array_equal(np.asarray(grad), np.full(residual.shape, 2.0, np.float32))
    leaf = to_torch(residual).requires_grad_()
    with pytest.raises(RuntimeError, match="rms_norm_dynamic_per_token_quant: input 'residual' is a leaf tensor "
                                           "that requires grad, which the op would update in place"):
        op_torch(to_torch(x), to_torch(weight), None, leaf)
    np.testing.assert_array_equal(as_numpy(leaf), residual)
    with torch.no_grad():
        op_torch(to_torch(x), to_torch(weight), None, leaf, eps=EPS)
    np.testing.assert_array_equal(as_numpy(leaf), want_residual)


# --- CUDA -------------------------------------------------------------------------------------------

# Rows the CUDA body holds in registers (1 to 8 vectors a thread, blocks of 32
# to 256 threads), rows too long for them (three passes), rows whose width is
# no multiple of a vector (element by element).
GPU_SHAPES = [(7, 64), (7, 512), (3, 1024), (64, 4096), (5, 8192), (4, 16384), (3, 40000), (9, 1001), (2, 3)]


def gpu_problem(rng, shape, dtype, residual):
    x, weight, r = problem(rng, shape, dtype, residual)
    x[0] = 0
    return x, weight, r


@requires_torch_cuda
@pytest.mark.parametrize("in_dtype", IN_DTYPES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=str)
def test_torch_cuda_against_the_reference_and_the_cpu_body(rng, in_dtype, out_dtype, shape):
    for with_residual in (True, False):
        x, weight, residual = gpu_problem(rng, shape, in_dtype, with_residual)
        for name, ub in bounds(x, weight, residual, in_dtype).items():
            where = f"residual {with_residual}, scale_ub {name}"
            gpu = op_torch(*(to_torch(a, "cuda") for a in (x, weight, ub, residual)), eps=EPS,
                           out_dtype=TORCH[out_dtype])
            assert gpu[0].device.type == "cuda"
            check(gpu, x, weight, residual, out_dtype, ub, where)
            cpu = op_torch(*(to_torch(a) for a in (x, weight, ub, residual)), eps=EPS, out_dtype=TORCH[out_dtype])
            for g, c in zip(gpu, cpu):
                if c is not None:
                    np.testing.assert_array_equal(as_numpy(g).astype(np.float64), as_numpy(c).astype(np.float64),
                                                  err_msg=where)


@requires_torch_cuda
@pytest.mark.parametrize("in_dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_torch_cuda_is_the_cpu_body_bit_for_bit_over_wide_magnitudes(rng, in_dtype, out_dtype):
    """The CUDA body computes the CPU body's values with other instructions
    (paired f16/bf16 products, the division by the scale as FMAs from its
    reciprocal): 4 M values whose magnitudes span 2^-24 to 2^12 in x and the
    weights, so that the quotients fall on every fp8 binade, its subnormals
    and its saturation, and -0 and halfway cases occur, with and without a
    residual and a bound."""
    shape = (1024, 4096)
    def wide(size):
        return (rng.choice([-1.0, 1.0], size) * np.exp2(rng.uniform(-24, 12, size))).astype(NUMPY[in_dtype])
    x, weight, residual = wide(shape), wide(shape[-1]), wide(shape)
    x[1] = -0.0
    x[2, ::2] = -0.0
    for with_residual, ub in ((False, None), (True, None), (False, np.float32(2.0 ** -6))):
        args = (x, weight, ub, residual if with_residual else None)
        gpu = op_torch(*(to_torch(a, "cuda") for a in args), eps=EPS, out_dtype=TORCH[out_dtype])
        cpu = op_torch(*(to_torch(a) for a in args), eps=EPS, out_dtype=TORCH[out_dtype])
        for g, c in zip(gpu, cpu):
            if c is not None:
                g, c = as_numpy(g), as_numpy(c)
                np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), c.view(f"u{c.itemsize}"),  # bits: -0 too
                                              err_msg=f"residual {with_residual}, scale_ub {ub}")


@requires_torch_cuda
@pytest.mark.parametrize("row_stride", [4104, 4097], ids=["stride on 16 bytes", "stride off 16 bytes"])
def test_torch_cuda_strided_rows(rng, row_stride):
    x, weight, residual = gpu_problem(rng, (33, 4096), "bfloat16", True)
    wide = torch.zeros(33, row_stride, dtype=torch.bfloat16, device="cuda")
    wide[:, :4096] = to_torch(x, "cuda")
    got = op_torch(wide[:, :4096], to_torch(weight, "cuda"), None, to_torch(residual, "cuda"), eps=EPS)
    check(got, x, weight, residual, "float8_e4m3fn")


@requires_torch_cuda
def test_torch_cuda_graph_reads_scale_ub_at_each_replay(rng):
    """A CUDA graph of the call (scale_ub [1] on the device, residual in
    place): each replay reads the bound the tensor holds then."""
    x, weight, residual = gpu_problem(rng, (9, 2048), "bfloat16", True)
    xt, wt = to_torch(x, "cuda"), to_torch(weight, "cuda")
    rt = to_torch(residual, "cuda")
    ub = torch.tensor([1.0], dtype=torch.float32, device="cuda")
    op_torch(xt, wt, ub, rt.clone(), eps=EPS)  # warm-up outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, scale, _ = op_torch(xt, wt, ub, rt, eps=EPS)
    for bound in (0.5, 0.25):
        rt.copy_(to_torch(residual, "cuda"))
        ub.fill_(bound)
        g.replay()
        torch.cuda.synchronize()
        check((out, scale, rt), x, weight, residual, "float8_e4m3fn", np.float32(bound))


@requires_jax_gpu
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=str)
def test_jax_cuda_against_the_reference(rng, out_dtype, api_version, shape):
    gpu = gpu_devices()[0]
    f = jax.jit(lambda *a: op_jax(*a, eps=EPS, out_dtype=out_dtype, api_version=api_version))
    for in_dtype, with_residual in itertools.product(IN_DTYPES, (True, False)):
        x, weight, residual = gpu_problem(rng, shape, in_dtype, with_residual)
        ub = bounds(x, weight, residual, in_dtype)["[1]"]
        for bound in (None, ub):
            args = [None if a is None else jax.device_put(a, gpu) for a in (x, weight, bound, residual)]
            check(f(*args), x, weight, residual, out_dtype, bound, f"{in_dtype}, residual {with_residual}")
