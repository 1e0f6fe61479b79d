"""topk_softmax, vLLM's MoE router: outputs sized by an integer attribute
([N, topk]) and an op declared not differentiable. Against an independent
reference (torch.softmax and torch.topk in float64) on fresh random logits
without ties (the tie rule is checked on its own), with topk drawn over its
range (1..E) and both values of renormalize: torch eager, the direct route and
torch.ops, torch.compile(fullgraph=True), opcheck, JAX eager and jit (both
api_versions), vmap; inputs that require grad and jax.grad/jvp/vjp (the
outputs are constants); the refusals (topk > E, topk < 1, a wrong dtype) in
both frameworks and the C++ kernel. CUDA variants skip without a GPU."""

import json

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
DTYPES = ["float32", "float16", "bfloat16"]
NUMPY = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
# Of the weights against the float64 reference: the op computes in f32 from the rounded logits.
TOLERANCE = 2e-6
requires_torch_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
requires_jax_gpu = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


def logits(rng, n, e, dtype):
    """Logits whose rows hold no tie in `dtype`: distinct values that the dtype
    holds exactly, drawn from the values it has in [-8, 8] (2105 of them in
    bfloat16, more in the others), shuffled in each row."""
    grid = np.unique(np.linspace(-8.0, 8.0, 40001).astype(NUMPY[dtype]).astype(np.float64))
    rows = np.stack([rng.choice(grid, size=e, replace=False) for _ in range(n)]) if n else np.zeros((0, e))
    return rows.astype(NUMPY[dtype])


def reference(x, topk, renormalize):
    """torch.softmax then torch.topk in float64 (vLLM's unfused router)."""
    p = torch.softmax(torch.from_numpy(np.asarray(x, np.float64)), -1)
    weights, indices = torch.topk(p, topk, dim=-1)
    if renormalize:
        weights = weights / weights.sum(-1, keepdim=True)
    return weights.numpy(), indices.numpy()


def assert_routes(got, x, topk, renormalize, where=""):
    weights, indices = (as_numpy(g) for g in got)
    want_w, want_i = reference(x, topk, renormalize)
    assert weights.dtype == np.float32 and indices.dtype == np.int32, where
    assert weights.shape == want_w.shape == indices.shape, where
    np.testing.assert_array_equal(indices, want_i, err_msg=where)
    np.testing.assert_allclose(weights, want_w, rtol=TOLERANCE, atol=1e-7, err_msg=where)


def draw(rng, dtype, e=None):
    """Sizes, logits and attributes of a call: topk anywhere in 1..E."""
    n = int(rng.integers(1, 40))
    e = e or int(rng.choice([1, 3, 8, 17, 64, 130, 256]))
    topk = int(rng.integers(1, e + 1))
    return logits(rng, n, e, dtype), topk, bool(rng.integers(2))


# --- Forward against the reference -------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_matches_softmax_then_topk(rng, dtype):
    for _ in range(6):
        x, topk, renormalize = draw(rng, dtype)
        t = to_torch(x)
        assert_routes(tops.topk_softmax(t, topk=topk, renormalize=renormalize), x, topk, renormalize, "direct")
        assert_routes(torch.ops.opgen_ops.topk_softmax(t, topk=topk, renormalize=renormalize), x, topk, renormalize,
                      "torch.ops")


@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("dtype", DTYPES)
def test_jax_matches_softmax_then_topk(rng, dtype, api_version):
    for _ in range(4):
        x, topk, renormalize = draw(rng, dtype)
        f = lambda x: jops.topk_softmax(x, topk=topk, renormalize=renormalize, api_version=api_version)  # noqa: E731
        xs = jax.device_put(x, CPU)
        assert_routes(jax.jit(f)(xs), x, topk, renormalize, "jit")
        assert_routes(f(xs), x, topk, renormalize, "eager")


def test_every_topk_in_range_sizes_the_outputs(rng):
    x = logits(rng, 5, 8, "float32")
    for topk in range(1, 9):
        weights, indices = tops.topk_softmax(to_torch(x), topk=topk)
        assert weights.shape == indices.shape == (5, topk)
        shapes = jax.eval_shape(lambda x, topk=topk: jops.topk_softmax(x, topk=topk), x)
        assert [s.shape for s in shapes] == [(5, topk)] * 2
        assert [s.dtype for s in shapes] == [jnp.float32, jnp.int32]
        assert_routes((weights, indices), x, topk, False)


def test_wide_rows_are_read_from_memory(rng):
    # E > 256 takes the CUDA body's other path; on the CPU it is the same body.
    x, topk, renormalize = draw(rng, "float32", e=1000)
    assert_routes(tops.topk_softmax(to_torch(x), topk=topk, renormalize=renormalize), x, topk, renormalize)


def test_ties_go_to_the_lower_index_and_nan_orders_last(rng):
    x = np.array([[1.0, 3.0, 3.0, 0.0, 3.0], [2.0, np.nan, 5.0, -np.inf, 1.0]], np.float32)
    for got in (tops.topk_softmax(to_torch(x), topk=5), jops.topk_softmax(x, topk=5)):
        weights, indices = (as_numpy(g) for g in got)
        np.testing.assert_array_equal(indices, [[1, 2, 4, 0, 3], [2, 0, 4, 1, 3]])
        assert np.all(np.isnan(weights[1]))  # a NaN logit makes the row's sum NaN
        np.testing.assert_allclose(weights[0], reference(x[:1], 5, False)[0][0], rtol=TOLERANCE)
    # Many ties (bf16 logits from a few values), against the stable-sort reference.
    x = rng.integers(-2, 3, (64, 32)).astype(ml_dtypes.bfloat16)
    for topk in (1, 5, 32):
        for renormalize in (False, True):
            weights, indices = tops.topk_softmax(to_torch(x), topk=topk, renormalize=renormalize)
            want_w, want_i = ref.topk_softmax(x, topk, renormalize)
            np.testing.assert_array_equal(indices.numpy(), want_i)
            np.testing.assert_allclose(weights.numpy(), want_w, rtol=TOLERANCE, atol=1e-7)


def test_renormalized_rows_sum_to_one(rng):
    x = logits(rng, 16, 64, "float32")
    weights, _ = tops.topk_softmax(to_torch(x), topk=4, renormalize=True)
    np.testing.assert_allclose(weights.sum(-1).numpy(), 1.0, rtol=1e-6)


def test_no_tokens(rng):
    x = np.zeros((0, 8), np.float32)
    weights, indices = tops.topk_softmax(torch.from_numpy(x), topk=2)
    assert weights.shape == indices.shape == (0, 2)
    assert [o.shape for o in jops.topk_softmax(x, topk=2)] == [(0, 2)] * 2


# --- Every entry point ---------------------------------------------------------------------------


def test_torch_compile_fullgraph(rng):
    x, topk, renormalize = draw(rng, "float32")
    f = torch.compile(lambda x: torch.ops.opgen_ops.topk_softmax(x, topk=topk, renormalize=renormalize),
                      fullgraph=True)
    assert_routes(f(to_torch(x)), x, topk, renormalize)


def test_opcheck(rng):
    for dtype in DTYPES:
        x, topk, renormalize = draw(rng, dtype)
        for grad in (False, True):
            t = to_torch(x).requires_grad_(grad)
            torch.library.opcheck(torch.ops.opgen_ops.topk_softmax.default, (t,),
                                  {"topk": topk, "renormalize": renormalize})


def test_jax_vmap_maps_over_a_stack_of_calls(rng):
    xs = np.stack([logits(rng, 6, 32, "float32") for _ in range(3)])
    weights, indices = jax.jit(jax.vmap(lambda x: jops.topk_softmax(x, topk=3)))(xs)
    assert weights.shape == indices.shape == (3, 6, 3)
    for k in range(3):
        assert_routes((weights[k], indices[k]), xs[k], 3, False)


# --- Not differentiable: constants under autograd and jax.grad -----------------------------------


def test_torch_inputs_that_require_grad_give_constant_outputs(rng):
    x, topk, renormalize = draw(rng, "float32")
    t = to_torch(x).requires_grad_()
    for f in (tops.topk_softmax, torch.ops.opgen_ops.topk_softmax,
              torch.compile(lambda t, **a: torch.ops.opgen_ops.topk_softmax(t, **a), fullgraph=True)):
        weights, indices = f(t, topk=topk, renormalize=renormalize)
        assert not weights.requires_grad and weights.grad_fn is None and not indices.requires_grad
        assert_routes((weights, indices), x, topk, renormalize)
    # A loss through the op and through x itself: the op adds nothing to x's gradient.
    weights, _ = tops.topk_softmax(t, topk=topk)
    (weights.sum() + (t * 2).sum()).backward()
    torch.testing.assert_close(t.grad, torch.full_like(t, 2.0))


@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_grad_jvp_and_vjp_see_constants(rng, api_version):
    x, topk, renormalize = draw(rng, "float32")
    xs = jax.device_put(x, CPU)

    def loss(x):
        weights, _ = jops.topk_softmax(x, topk=topk, renormalize=renormalize, api_version=api_version)
        return weights.sum() + (x * 3.0).sum()

    np.testing.assert_array_equal(np.asarray(jax.jit(jax.grad(loss))(xs)), np.full(x.shape, 3.0, np.float32))
    np.testing.assert_array_equal(np.asarray(jax.grad(loss)(xs)), np.full(x.shape, 3.0, np.float32))
    per_call = jax.vmap(jax.grad(loss))(np.stack([x, x]))
    np.testing.assert_array_equal(np.asarray(per_call), np.full((2, *x.shape), 3.0, np.float32))
    f = lambda x: jops.topk_softmax(x, topk=topk, api_version=api_version)[0]  # noqa: E731
    out, tangent = jax.jvp(f, (xs,), (jnp.ones_like(xs),))
    assert_routes((out, jops.topk_softmax(xs, topk=topk)[1]), x, topk, False)
    np.testing.assert_array_equal(np.asarray(tangent), 0.0)
    _, pullback = jax.vjp(f, xs)
    np.testing.assert_array_equal(np.asarray(pullback(jnp.ones((x.shape[0], topk), jnp.float32))[0]), 0.0)


# --- Refusals --------------------------------------------------------------------------------------


def test_topk_outside_1_to_e_is_refused_by_every_entry_point(rng):
    x = logits(rng, 4, 8, "float32")
    t = to_torch(x)
    for topk, message in [(9, r"topk_softmax: the spec requires topk <= E, but topk = 9, E = 8"),
                          (0, r"topk_softmax: attribute 'topk' = 0 must be >= 1"),
                          (-3, r"topk_softmax: attribute 'topk' = -3 must be >= 1")]:
        with pytest.raises(ValueError, match=message):
            jops.topk_softmax(x, topk=topk)
        with pytest.raises(RuntimeError, match=message):
            tops.topk_softmax(t, topk=topk)
        with pytest.raises(RuntimeError, match=message):
            torch.compile(lambda t: torch.ops.opgen_ops.topk_softmax(t, topk=topk), fullgraph=True)(t)
    # The C++ kernel, called with the same arguments, refuses them too (the
    # range of an attribute that sizes outputs before any output is allocated).
    with pytest.raises(RuntimeError, match=r"topk_softmax: attribute 'topk' = -3 must be >= 1"):
        torch.ops.opgen_ops.topk_softmax.default._op(t, topk=-3, renormalize=False)
    with pytest.raises(RuntimeError, match=r"the spec requires topk <= E, but topk = 9, E = 8"):
        torch.ops.opgen_ops.topk_softmax.default._op(t, topk=9, renormalize=False)


def test_a_topk_whose_outputs_overflow_int64_is_refused_before_allocation():
    x = torch.zeros(4, 8)
    with pytest.raises(RuntimeError, match=r"topk_softmax: output 'topk_weights' \[N, topk\] = \[4, "
                                           r"4611686018427387904\] would have more than 2\^63 - 1 elements"):
        torch.ops.opgen_ops.topk_softmax.default._op(x, topk=2**62, renormalize=False)
    s = jax.ShapeDtypeStruct((4, 8), jnp.float32)
    with pytest.raises(ValueError, match=r"topk_softmax: output 'topk_weights' \[N, topk\] = \[4, "
                                         r"4611686018427387904\] would have more than 2\^63 - 1 elements"):
        jax.eval_shape(lambda x: jops.topk_softmax(x, topk=2**62), s)


def test_a_topk_past_e_is_refused_for_its_constraint_before_anything_is_allocated(rng, capfd):
    """topk = 2**40 > E = 8: the outputs would take 16 TiB and 4 TiB, more than the machine
    has. The C++ kernel refuses the call for the spec's constraint, in JAX's words, before it
    asks torch's allocator for them (whose failure prints a C++ stack trace on stderr)."""
    x = logits(rng, 4, 8, "float32")
    t = to_torch(x)
    with pytest.raises(ValueError) as jax_error:
        jops.topk_softmax(x, topk=2**40)
    message = str(jax_error.value)
    assert message == "topk_softmax: the spec requires topk <= E, but topk = 1099511627776, E = 8"
    with pytest.raises(RuntimeError) as kernel_error:
        torch.ops.opgen_ops.topk_softmax.default._op(t, topk=2**40, renormalize=False)
    assert str(kernel_error.value) == message
    with pytest.raises(RuntimeError) as wrapper_error:
        tops.topk_softmax(t, topk=2**40)
    assert str(wrapper_error.value) == message
    assert capfd.readouterr().err == ""


def test_a_refused_call_holds_no_memory(rng, tmp_path):
    """topk = 10**6 > E = 8: outputs of 16 MB and 16 MB, which the allocator would give. The
    kernel refuses the call before it allocates them: torch's profiler records no allocation."""
    t = to_torch(logits(rng, 4, 8, "float32"))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        with pytest.raises(RuntimeError, match=r"the spec requires topk <= E, but topk = 1000000, E = 8"):
            torch.ops.opgen_ops.topk_softmax.default._op(t, topk=10**6, renormalize=False)
        # The record works: a call that runs allocates its outputs.
        torch.ops.opgen_ops.topk_softmax.default._op(t, topk=3, renormalize=False)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    allocated = [e["args"]["Bytes"] for e in json.loads(trace.read_text())["traceEvents"]
                 if e.get("name") == "[memory]" and e["args"]["Bytes"] > 0]
    assert sorted(allocated) == [4 * 3 * 4, 4 * 3 * 4], allocated


@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_a_wrong_dtype_is_refused(dtype):
    x = np.zeros((4, 8), dtype)
    message = rf"topk_softmax: input 'gating_output' has dtype {dtype}; T must be one of float32, float16, bfloat16"
    # (float64 under jax_enable_x64: without it JAX hands the custom call float32, test_jax_x64.py.)
    with jax.enable_x64(dtype == "float64"), pytest.raises(TypeError, match=message):
        jops.topk_softmax(x, topk=2)
    with pytest.raises(RuntimeError, match=message):
        tops.topk_softmax(torch.from_numpy(x), topk=2)


# --- CUDA ----------------------------------------------------------------------------------------


@requires_torch_cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_cuda_matches_softmax_then_topk(rng, dtype):
    # Every path of the CUDA body: rows shared by a warp (E <= 16), rows in
    # registers, rows read from memory (E > 256).
    for e in (1, 5, 8, 16, 17, 32, 33, 64, 100, 128, 200, 256, 257, 1000):
        x = logits(rng, int(rng.integers(1, 300)), e, dtype)
        for topk in sorted({1, min(2, e), min(8, e), e}):
            renormalize = bool(rng.integers(2))
            got = tops.topk_softmax(to_torch(x, "cuda"), topk=topk, renormalize=renormalize)
            assert_routes(got, x, topk, renormalize, f"E={e} topk={topk}")
    x = logits(rng, 3, 8, dtype)
    t = to_torch(x, "cuda").requires_grad_()
    weights, indices = tops.topk_softmax(t, topk=2)
    assert not weights.requires_grad and not indices.requires_grad


@requires_torch_cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_cuda_many_tokens_take_groups_of_eight_lanes(rng, dtype):
    # From 16384 rows the CUDA body routes four rows a warp: every row width it does so for.
    for e in (9, 16, 17, 32, 33, 64, 100, 128, 200, 256):
        x = logits(rng, 16384 + int(rng.integers(0, 100)), e, dtype)
        topk = int(rng.integers(1, min(8, e) + 1))
        renormalize = bool(rng.integers(2))
        got = tops.topk_softmax(to_torch(x, "cuda"), topk=topk, renormalize=renormalize)
        assert_routes(got, x, topk, renormalize, f"E={e} topk={topk}")


@requires_torch_cuda
def test_torch_cuda_many_tokens_and_cuda_graphs(rng):
    x = logits(rng, 65536, 64, "bfloat16")
    t = to_torch(x, "cuda")
    f = torch.compile(lambda t: torch.ops.opgen_ops.topk_softmax(t, topk=8, renormalize=True),
                      mode="reduce-overhead", fullgraph=True)
    for _ in range(3):
        got = f(t)
    assert_routes(got, x, 8, True)


@requires_jax_gpu
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_gpu_matches_softmax_then_topk(rng, api_version):
    gpu = gpu_devices()[0]
    for dtype in DTYPES:
        for e in (8, 64, 256, 300):
            x = logits(rng, 1000, e, dtype)
            f = jax.jit(lambda x: jops.topk_softmax(x, topk=min(8, e), api_version=api_version))
            assert_routes(f(jax.device_put(x, gpu)), x, min(8, e), False, f"{dtype} E={e}")
