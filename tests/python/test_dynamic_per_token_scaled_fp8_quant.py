"""dynamic_per_token_scaled_fp8_quant, vLLM's per-token fp8 quantisation: an
output whose dtype the caller chooses (a dtype attribute, out_dtype) and a
scale whose dtype T derives (S: f32, f64 for f64 input). Against a float64
numpy reference (op_references): each fp8 value within one fp8 ulp of the
reference's, the scale to its dtype's rounding, for every T and out_dtype,
with and without scale_ub: JAX jit (both api_versions), torch eager and
torch.compile; a row of zeros, a row with one huge value, saturation under
scale_ub; outputs that are constants under differentiation; an out_dtype
outside its values refused by the Python checks (JAX, torch) and by the C++
bindings themselves (torch.ops, the typed FFI, the legacy descriptor). CUDA
variants (rows held in registers, rows read twice, rows not 16-byte aligned)
skip without a GPU."""

import re

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
from opgen_ops import _opaque, _spec
from opgen_ops._ops import dynamic_per_token_scaled_fp8_quant as spec
from torch_arrays import as_numpy, to_torch

OP = spec.OP
quant_jax = jops.dynamic_per_token_scaled_fp8_quant
quant_torch = tops.dynamic_per_token_scaled_fp8_quant
CPU = jax.devices("cpu")[0]
IN_DTYPES = ["float16", "bfloat16", "float32", "float64"]
OUT_DTYPES = ["float8_e4m3fn", "float8_e5m2"]
NUMPY = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64}
TORCH = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
SCALE = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}
# Of the scale against the float64 reference: one rounding of amax / max.
SCALE_RTOL = {"float32": 2e-7, "float64": 1e-15}
ALLOWED = "float8_e4m3fn, float8_e5m2"
requires_torch_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
requires_jax_gpu = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


def activations(rng, shape, dtype, spread=4.0):
    """Random rows of differing magnitudes (each row times 2^k, k in [-spread, spread])."""
    x = rng.standard_normal(shape) * np.exp2(rng.uniform(-spread, spread, shape[:-1] + (1,)))
    return x.astype(NUMPY[dtype])


def dtype_name(a) -> str:
    return str(a.dtype).removeprefix("torch.") if isinstance(a, torch.Tensor) else np.dtype(a.dtype).name


def check(x, out, scale, out_dtype, scale_ub=None):
    """out and scale against the reference: the scale to its dtype's rounding,
    each value of out within one fp8 ulp of the reference's x / scale."""
    want, want_scale = ref.dynamic_per_token_scaled_fp8_quant(x, out_dtype, scale_ub)
    assert dtype_name(out) == out_dtype and dtype_name(scale) == SCALE[np.asarray(x).dtype.name]
    out, scale = as_numpy(out).astype(np.float64), as_numpy(scale)
    assert out.shape == np.shape(x) and scale.shape == np.shape(x)[:-1]
    np.testing.assert_allclose(scale.astype(np.float64), want_scale, rtol=SCALE_RTOL[scale.dtype.name], atol=0)
    got = out
    assert np.all(np.isfinite(got)), "a quantised value is not finite"
    assert np.all(np.abs(got - want) <= ref.fp8_ulp(want, out_dtype)), \
        f"{np.max(np.abs(got - want) / ref.fp8_ulp(want, out_dtype)):.3g} ulps off"


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize("in_dtype", IN_DTYPES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_jit_against_the_reference(rng, in_dtype, out_dtype, api_version):
    x = activations(rng, (3, 5, 96), in_dtype)
    ub = np.asarray(np.abs(x.astype(np.float64)).max() / 3, SCALE[in_dtype])
    for scale_ub in (None, ub):
        f = jax.jit(lambda x, u: quant_jax(x, u, out_dtype=getattr(jnp, out_dtype), api_version=api_version))
        out, scale = f(jax.device_put(x, CPU), scale_ub)
        check(x, out, scale, out_dtype, scale_ub)


@pytest.mark.parametrize("in_dtype", IN_DTYPES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_torch_eager_and_compile_against_the_reference(rng, in_dtype, out_dtype):
    x = activations(rng, (7, 130), in_dtype)
    for out, scale in (quant_torch(to_torch(x), out_dtype=TORCH[out_dtype]),
                       torch.ops.opgen_ops.dynamic_per_token_scaled_fp8_quant(to_torch(x), out_dtype=TORCH[out_dtype]),
                       quant_torch(to_torch(x), out_dtype=out_dtype)):  # the wrapper also takes the dtype's name
        check(x, out, scale, out_dtype)
    compiled = torch.compile(lambda x: quant_torch(x, out_dtype=TORCH[out_dtype]), fullgraph=True)
    out, scale = compiled(to_torch(x))
    check(x, out, scale, out_dtype)


def test_the_default_out_dtype_is_e4m3fn(rng):
    x = activations(rng, (2, 16), "float32")
    assert quant_jax(x)[0].dtype == jnp.float8_e4m3fn
    assert quant_torch(to_torch(x))[0].dtype == torch.float8_e4m3fn


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_a_row_of_zeros_gets_the_smallest_scale_and_zeros(rng, out_dtype):
    x = activations(rng, (4, 64), "bfloat16")
    x[2] = 0
    top = ref.FP8[out_dtype][0]
    for out, scale in (quant_jax(x, out_dtype=out_dtype), quant_torch(to_torch(x), out_dtype=TORCH[out_dtype])):
        assert as_numpy(scale)[2] == np.float32(1.0 / (top * 512.0))
        assert not np.any(as_numpy(out)[2].astype(np.float32))
        check(x, out, scale, out_dtype)


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_a_huge_value_takes_the_top_of_the_range(rng, out_dtype):
    x = activations(rng, (3, 256), "float32", spread=0)
    x[1, 17] = -3.0e30
    top = ref.FP8[out_dtype][0]
    for out, scale in (quant_jax(x, out_dtype=out_dtype), quant_torch(to_torch(x), out_dtype=TORCH[out_dtype])):
        out = as_numpy(out).astype(np.float64)
        assert out[1, 17] == -top
        assert as_numpy(scale)[1] == np.float32(np.float32(3.0e30) / np.float32(top))
        check(x, out.astype(getattr(ml_dtypes, out_dtype)), scale, out_dtype)


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_scale_ub_saturates_the_rows_above_it(rng, out_dtype):
    x = activations(rng, (6, 40), "float32", spread=0)
    ub = np.float32(0.5)
    top = ref.FP8[out_dtype][0]
    out, scale = quant_jax(x, ub, out_dtype=out_dtype)
    got = as_numpy(out).astype(np.float64)
    assert np.all(as_numpy(scale) == np.float32(ub / np.float32(top)))
    assert np.all(np.abs(got) <= top) and np.all(got[np.abs(x) > 0.5 + 1e-3] != 0)
    assert np.all(np.abs(got[np.abs(x) >= 0.5 * (1 + 2.0 ** -ref.FP8[out_dtype][1])]) == top)
    check(x, out, scale, out_dtype, ub)
    check(x, *quant_torch(to_torch(x), to_torch(ub), out_dtype=TORCH[out_dtype]), out_dtype, ub)


def test_scale_ub_has_the_scale_dtype(rng):
    x = activations(rng, (2, 8), "float64")
    with pytest.raises(TypeError, match=r"input 'scale_ub' has dtype float32; the spec declares float64"):
        quant_jax(x, np.float32(1.0))
    with pytest.raises(RuntimeError, match="input 'scale_ub' has dtype float32"):
        torch.ops.opgen_ops.dynamic_per_token_scaled_fp8_quant(to_torch(x), to_torch(np.float32(1.0)))


# --- out_dtype outside its values -------------------------------------------------------------------


@pytest.mark.parametrize("bad", [jnp.float32, "float16", np.dtype("int8"), jnp.bfloat16])
def test_jax_refuses_an_out_dtype_outside_its_values(rng, bad):
    x = activations(rng, (2, 8), "float32")
    name = np.dtype(bad).name
    message = f"dynamic_per_token_scaled_fp8_quant: attribute 'out_dtype' is {name}; it must be one of {ALLOWED}"
    with pytest.raises(ValueError, match=message):
        jax.jit(lambda x: quant_jax(x, out_dtype=bad))(x)


def test_jax_refuses_what_is_no_dtype(rng):
    with pytest.raises(TypeError, match="attribute 'out_dtype' must be a dtype, one of float8_e4m3fn"):
        quant_jax(activations(rng, (2, 8), "float32"), out_dtype=3.5)


def test_none_is_no_dtype_on_every_route(rng):
    """None is refused as what is no dtype, where numpy reads it as float64
    (np.dtype(None)): JAX eager and jit, the torch wrapper's direct and full
    routes and torch.compile, with one message; torch.ops through torch's
    schema parser, which takes no None for a ScalarType."""
    x = activations(rng, (2, 8), "float32")
    message = re.escape(f"dynamic_per_token_scaled_fp8_quant: attribute 'out_dtype' must be a dtype, one of {ALLOWED}; "
                        "not NoneType")
    with pytest.raises(TypeError, match=message):
        quant_jax(x, out_dtype=None)
    with pytest.raises(TypeError, match=message):
        jax.jit(lambda x: quant_jax(x, out_dtype=None))(x)
    t = to_torch(x)
    with pytest.raises(TypeError, match=message):
        quant_torch(t, out_dtype=None)
    with pytest.raises(TypeError, match=message):  # the full route: under a torch function mode
        with torch.overrides.TorchFunctionMode():
            quant_torch(t, out_dtype=None)
    with pytest.raises(Exception, match=message):
        torch.compile(lambda x: quant_torch(x, out_dtype=None), fullgraph=True)(t)
    with pytest.raises(RuntimeError, match="Expected a value of type 'int' for argument 'out_dtype' but instead found "
                                           "type 'NoneType'"):
        torch.ops.opgen_ops.dynamic_per_token_scaled_fp8_quant(t, out_dtype=None)


def test_none_is_not_float64_for_a_dtype_attribute_that_lists_it():
    """A dtype attribute whose values include float64 (a spec's `values: [f32,
    f64]`) took None silently as float64."""
    attr = _spec.Attr("acc_dtype", "dtype", values=("float32", "float64"))
    assert _spec.check_attr("acc", attr, np.float64) == "float64"
    with pytest.raises(TypeError, match=r"acc: attribute 'acc_dtype' must be a dtype, one of float32, float64; "
                                        r"not NoneType"):
        _spec.check_attr("acc", attr, None)


@pytest.mark.parametrize("bad", [torch.float32, torch.int8, torch.float8_e4m3fnuz])
def test_torch_refuses_an_out_dtype_outside_its_values(rng, bad):
    x = to_torch(activations(rng, (2, 8), "float32"))
    name = str(bad).removeprefix("torch.")
    message = f"dynamic_per_token_scaled_fp8_quant: attribute 'out_dtype' is {name}; it must be one of {ALLOWED}"
    with pytest.raises(ValueError, match=message):
        quant_torch(x, out_dtype=bad)
    with pytest.raises(Exception, match=f"attribute 'out_dtype' is {name}; it must be one of {ALLOWED}"):
        torch.compile(lambda x: quant_torch(x, out_dtype=bad))(x)


def test_the_torch_kernel_itself_refuses_an_out_dtype_outside_its_values(rng):
    x = to_torch(activations(rng, (2, 8), "float32"))
    op = torch.ops.opgen_ops.dynamic_per_token_scaled_fp8_quant
    with pytest.raises(RuntimeError, match=f"attribute 'out_dtype' is float16; it must be one of {ALLOWED}"):
        op(x, out_dtype=torch.float16)
    # A dtype opgen does not support, which torch names.
    with pytest.raises(RuntimeError, match=f"attribute 'out_dtype' is int16; it must be one of {ALLOWED}"):
        op(x, out_dtype=torch.int16)


def test_the_typed_ffi_handler_itself_refuses_an_out_dtype_outside_its_values(rng):
    """A raw ffi_call past the wrapper's checks: the handler reads the code."""
    x = activations(rng, (2, 8), "float32")
    results = [jax.ShapeDtypeStruct(x.shape, jnp.float8_e4m3fn), jax.ShapeDtypeStruct(x.shape[:-1], jnp.float32)]
    raw = jax.ffi.ffi_call(OP.ffi_target, results)
    codes = OP.opaque.codes
    with pytest.raises(Exception, match="attribute 'out_dtype' is f32; it must be one of f8e4m3fn, f8e5m2"):
        jax.block_until_ready(raw(x, out_dtype=np.int32(codes["float32"]), present_=np.int64(0)))
    # The code names e5m2 where the result buffer is e4m3fn: the result is refused.
    with pytest.raises(Exception, match="output 'out'"):
        jax.block_until_ready(raw(x, out_dtype=np.int32(codes["float8_e5m2"]), present_=np.int64(0)))
    out, scale = raw(x, out_dtype=np.int32(codes["float8_e4m3fn"]), present_=np.int64(0))
    check(x, out, scale, "float8_e4m3fn")


def test_the_legacy_handler_itself_refuses_an_out_dtype_outside_its_values(rng, capfd):
    """A descriptor whose out_dtype field is a code outside its values: the
    call fails (reported) before the outputs are sized, so they are left as
    they are (docs/spec.md), and the body never runs."""
    x = activations(rng, (2, 8), "float32")
    fields = {"dtype_T": OP.opaque.codes["float32"], "present_": 0, "batch": 2, "D": 8,
              "out_dtype": OP.opaque.codes["float16"]}
    results = [jax.ShapeDtypeStruct(x.shape, jnp.float8_e4m3fn), jax.ShapeDtypeStruct(x.shape[:-1], jnp.float32)]
    raw = jax.ffi.ffi_call(OP.legacy_target(3), results, custom_call_api_version=3,
                           legacy_backend_config=_opaque.encode(OP, **fields))
    try:
        jax.block_until_ready(raw(x))
    except Exception as e:  # where XLA's status reaches Python
        assert "attribute 'out_dtype' is f16; it must be one of f8e4m3fn, f8e5m2" in str(e)
        return
    # Otherwise the report on stderr says so, and what the outputs hold: not poison.
    report = [line for line in capfd.readouterr().err.splitlines() if line.startswith("opgen: ")]
    assert report == [
        f"opgen: error: {OP.legacy_target(3)}: dynamic_per_token_scaled_fp8_quant: attribute 'out_dtype' is f16; "
        "it must be one of f8e4m3fn, f8e5m2",
        "opgen: the kernel was not run; the call was refused before its outputs were bound: they are left as they "
        "are (whatever the buffers held before, not poison); XLA's status setter is not exported in this process, "
        "so the error cannot reach the framework (use api_version 4)"], report


# --- Not differentiable ----------------------------------------------------------------------------


def test_jax_grad_gives_the_input_a_zero_gradient(rng):
    x = activations(rng, (3, 16), "float32")
    g = jax.grad(lambda x: jnp.sum(quant_jax(x)[1]) + jnp.sum(quant_jax(x)[0].astype(jnp.float32)))(x)
    assert not np.any(np.asarray(g))


def test_torch_outputs_of_an_input_that_requires_grad_are_constants(rng):
    x = to_torch(activations(rng, (3, 16), "float32")).requires_grad_()
    for out, scale in (quant_torch(x, out_dtype=torch.float8_e5m2),
                       torch.ops.opgen_ops.dynamic_per_token_scaled_fp8_quant(x)):
        assert not out.requires_grad and not scale.requires_grad
        assert out.grad_fn is None and scale.grad_fn is None


# --- CUDA ------------------------------------------------------------------------------------------

# Rows the CUDA body holds in registers (16-byte vectors: 1 to 8 a thread, in
# blocks of 32 to 256 threads), rows too long for them (read twice), and rows
# whose width is no multiple of a vector (element by element).
GPU_SHAPES = [(7, 256), (7, 512), (7, 1024), (64, 4096), (5, 8192), (4, 16384), (3, 40000), (9, 1001), (2, 3)]


@requires_torch_cuda
@pytest.mark.parametrize("in_dtype", IN_DTYPES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=str)
def test_torch_cuda_against_the_reference_and_the_cpu_body(rng, in_dtype, out_dtype, shape):
    x = activations(rng, shape, in_dtype)
    x[0] = 0
    gpu = quant_torch(to_torch(x, "cuda"), out_dtype=TORCH[out_dtype])
    assert gpu[0].device.type == "cuda"
    check(x, *gpu, out_dtype)
    cpu = quant_torch(to_torch(x), out_dtype=TORCH[out_dtype])
    for g, c in zip(gpu, cpu):
        np.testing.assert_array_equal(as_numpy(g).astype(np.float64), as_numpy(c).astype(np.float64))


@requires_torch_cuda
def test_torch_cuda_with_scale_ub_and_under_compile(rng):
    x = activations(rng, (33, 2048), "bfloat16")
    ub = np.float32(0.25)
    f = torch.compile(lambda x, u: quant_torch(x, u, out_dtype=torch.float8_e5m2), fullgraph=True)
    check(x, *f(to_torch(x, "cuda"), to_torch(ub, "cuda")), "float8_e5m2", ub)


@requires_jax_gpu
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("api_version", [4, 3])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=str)
def test_jax_cuda_against_the_reference(rng, out_dtype, api_version, shape):
    for in_dtype in IN_DTYPES:
        x = activations(rng, shape, in_dtype)
        f = jax.jit(lambda x: quant_jax(x, out_dtype=out_dtype, api_version=api_version))
        check(x, *f(jax.device_put(x, gpu_devices()[0])), out_dtype)


# --- scale_ub as [] or [1] (a scalar input; vLLM passes it as [1]) ------------------------------------


SCALAR_REFUSED = ("dynamic_per_token_scaled_fp8_quant: input 'scale_ub' has shape {}; the spec declares a scalar: "
                  "[] or [1]")


def test_scale_ub_of_shape_1_on_every_jax_route(rng):
    """scale_ub as [1]: JAX eager, jit (both api_versions), vmap over x (the
    [1] unmapped) and over both (a [B, 1] stack), and under a raw typed-FFI
    call past the wrapper: the results of scale_ub as [], and the reference."""
    x = activations(rng, (4, 48), "float32", spread=1)
    ub = np.float32(np.abs(x).max() / 3)
    want = quant_jax(x, ub)
    check(x, *want, "float8_e4m3fn", ub)
    one = np.asarray([ub])
    routes = {"eager": quant_jax(x, one), "eager, api_version 3": quant_jax(x, one, api_version=3)}
    for v in OP.api_versions:
        routes[f"jit, api_version {v}"] = jax.jit(lambda x, u, v=v: quant_jax(x, u, api_version=v))(x, one)
    for name, (out, scale) in routes.items():
        check(x, out, scale, "float8_e4m3fn", ub)
        for g, w in zip((out, scale), want):
            np.testing.assert_array_equal(np.asarray(g).astype(np.float64), np.asarray(w).astype(np.float64),
                                          err_msg=name)
    out, scale = jax.vmap(quant_jax, in_axes=(0, None))(np.stack([x, -x]), one)
    for k, sign in enumerate((1, -1)):
        check(sign * x, out[k], scale[k], "float8_e4m3fn", ub)
    ubs = np.asarray([[ub], [ub / 2]])  # [2, 1]: each call's [1]
    out, scale = jax.vmap(quant_jax)(np.stack([x, x]), ubs)
    for k in range(2):
        check(x, out[k], scale[k], "float8_e4m3fn", ubs[k, 0])
    results = [jax.ShapeDtypeStruct(x.shape, jnp.float8_e4m3fn), jax.ShapeDtypeStruct(x.shape[:-1], jnp.float32)]
    raw = jax.ffi.ffi_call(OP.ffi_target, results)
    check(x, *raw(x, one, out_dtype=np.int32(OP.opaque.codes["float8_e4m3fn"]), present_=np.int64(1)),
          "float8_e4m3fn", ub)


def test_scale_ub_of_shape_1_on_every_torch_route(rng):
    """scale_ub as [1]: the torch wrapper, torch.ops, torch.compile(fullgraph)
    and fake tensors (the meta kernel's shapes): the results of scale_ub as
    [], and the reference."""
    x = activations(rng, (5, 40), "bfloat16", spread=1)
    ub = np.float32(np.abs(x.astype(np.float32)).max() / 4)
    want = quant_torch(to_torch(x), to_torch(ub))
    check(x, *want, "float8_e4m3fn", ub)
    one = to_torch(np.asarray([ub]))
    compiled = torch.compile(lambda x, u: quant_torch(x, u), fullgraph=True)
    routes = {"wrapper": quant_torch(to_torch(x), one),
              "torch.ops": torch.ops.opgen_ops.dynamic_per_token_scaled_fp8_quant(to_torch(x), one),
              "torch.compile": compiled(to_torch(x), one)}
    for name, (out, scale) in routes.items():
        check(x, out, scale, "float8_e4m3fn", ub)
        for g, w in zip((out, scale), want):
            torch.testing.assert_close(g.to(torch.float64), w.to(torch.float64), rtol=0, atol=0, msg=name)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = quant_torch(mode.from_tensor(to_torch(x)), mode.from_tensor(one))
    assert [tuple(f.shape) for f in fake] == [x.shape, x.shape[:-1]]
    assert [f.dtype for f in fake] == [torch.float8_e4m3fn, torch.float32]
    meta = quant_torch(to_torch(x).to("meta"), one.to("meta"))
    assert [tuple(m.shape) for m in meta] == [x.shape, x.shape[:-1]]


@pytest.mark.parametrize("shape", [(2,), (1, 1)], ids=str)
def test_scale_ub_of_another_shape_is_refused_on_every_route(rng, shape):
    """[2] and [1, 1] are no scalar: the same message from JAX (eager, jit,
    vmap), the raw typed-FFI handler, the torch wrapper, torch.ops,
    torch.compile and fake tensors."""
    x = activations(rng, (3, 16), "float32")
    ub = np.full(shape, 0.5, np.float32)
    message = re.escape(SCALAR_REFUSED.format(list(shape)))
    with pytest.raises(ValueError, match=message):
        quant_jax(x, ub)
    with pytest.raises(ValueError, match=message):
        jax.jit(quant_jax)(x, ub)
    with pytest.raises(ValueError, match=message):
        jax.vmap(quant_jax, in_axes=(0, None))(np.stack([x, x]), ub)
    results = [jax.ShapeDtypeStruct(x.shape, jnp.float8_e4m3fn), jax.ShapeDtypeStruct(x.shape[:-1], jnp.float32)]
    raw = jax.ffi.ffi_call(OP.ffi_target, results)
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(raw(x, ub, out_dtype=np.int32(OP.opaque.codes["float8_e4m3fn"]), present_=np.int64(1)))
    t, u = to_torch(x), to_torch(ub)
    with pytest.raises(RuntimeError, match=message):  # its direct route: the kernel's own check
        quant_torch(t, u)
    with pytest.raises(RuntimeError, match=message):
        torch.ops.opgen_ops.dynamic_per_token_scaled_fp8_quant(t, u)
    with pytest.raises(Exception, match=message):
        torch.compile(lambda x, u: quant_torch(x, u), fullgraph=True)(t, u)
    with pytest.raises(Exception, match=message):
        quant_torch(t.to("meta"), u.to("meta"))


@requires_torch_cuda
def test_torch_cuda_scale_ub_of_shape_1_under_a_cuda_graph(rng):
    """The CUDA body reads scale_ub ([1], on the device) itself: the call is
    captured in a CUDA graph (a host sync would fail the capture), and each
    replay reads the bound the tensor holds then."""
    x = activations(rng, (9, 512), "bfloat16", spread=1)
    xt = to_torch(x, "cuda")
    ub = torch.tensor([0.25], dtype=torch.float32, device="cuda")
    quant_torch(xt, ub)  # the first call outside the capture (its state, the allocator's warm-up)
    graph = torch.cuda.graph_pool_handle()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=graph):
        out, scale = quant_torch(xt, ub)
    for bound in (0.25, 0.125):
        ub.fill_(bound)
        g.replay()
        torch.cuda.synchronize()
        check(x, out, scale, "float8_e4m3fn", np.float32(bound))


@requires_jax_gpu
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_cuda_scale_ub_of_shape_1(rng, api_version):
    x = activations(rng, (9, 512), "float32", spread=1)
    ub = np.asarray([0.25], np.float32)
    gpu = gpu_devices()[0]
    f = jax.jit(lambda x, u: quant_jax(x, u, api_version=api_version))
    check(x, *f(jax.device_put(x, gpu), jax.device_put(ub, gpu)), "float8_e4m3fn", ub[0])
