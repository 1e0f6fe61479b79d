"""Enum and integer-array attributes (glu's `activation`, flip's `dims`) on
the CPU: JAX through the typed FFI (string and array attributes) and the
legacy descriptor (index and trailing elements), PyTorch through the lowered
stable-ABI kernel, and torch_xla's HLO; plus every way to get them wrong."""

import os

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax
import ml_dtypes
import numpy as np
import pytest
import torch

import opgen_ops.jax as jops
import opgen_ops.torch as tops
from opgen_ops import _opaque, _ops
import op_references as ref

CPU = jax.devices("cpu")[0]
ACTIVATIONS = ["sigmoid", "gelu", "silu"]
FLIP_DTYPES = ["float16", "bfloat16", "float32", "int32", "uint8", "bool", "float8_e4m3fn", "float8_e5m2", "int8"]
DIMS = [(), (-1,), (-2,), (-2, -1), (-1, -2)]


def random(rng, shape, dtype):
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype == "int8":
        return rng.integers(-128, 128, shape).astype(dtype)
    if dtype in ("int32", "int64", "uint8"):
        return rng.integers(0, 200, shape).astype(dtype)
    return rng.standard_normal(shape).astype(getattr(ml_dtypes, dtype, dtype))


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_glu_activations(rng, activation, api_version):
    x = jax.device_put(random(rng, (3, 4, 10), "float32"), CPU)
    out = jax.jit(lambda x: jops.glu(x, activation=activation, api_version=api_version))(x)
    assert ref.relative_error(out, ref.glu(x, activation)) < ref.TOLERANCE["float32"]


def test_jax_glu_passes_the_enum_as_a_string_attribute(rng):
    x = random(rng, (2, 8), "float32")
    text = jax.jit(lambda x: jops.glu(x, activation="gelu")).lower(x).as_text()
    assert 'activation = "gelu"' in text, text


@pytest.mark.parametrize("dtype", FLIP_DTYPES)
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_flip(rng, dtype, dims, api_version):
    x = random(rng, (2, 3, 5, 7), dtype)
    out = jax.jit(lambda x: jops.flip(x, dims=dims, api_version=api_version))(jax.device_put(x, CPU))
    assert np.array_equal(np.asarray(out), np.flip(x, dims))


def test_jax_flip_takes_numpy_arrays_and_vmaps(rng):
    x = random(rng, (4, 3, 5), "float32")
    out = jax.vmap(lambda m: jops.flip(m, dims=np.array([-2])))(x)
    np.testing.assert_array_equal(np.asarray(out), np.flip(x, 1))


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_torch_glu_matches_torch(rng, activation, dtype):
    x = torch.from_numpy(random(rng, (3, 5, 12), "float32")).to(getattr(torch, dtype))
    out = tops.glu(x, activation=activation)
    a, b = x.double().chunk(2, -1)
    gate = {"sigmoid": torch.sigmoid, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}[activation]
    want = (a * gate(b)).numpy()
    assert ref.relative_error(out.double().numpy(), want) < ref.TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", FLIP_DTYPES + ["int64", "float64"])
@pytest.mark.parametrize("dims", DIMS)
def test_torch_flip_matches_torch(rng, dtype, dims):
    x = torch.from_numpy(np.asarray(random(rng, (2, 4, 6), "float32" if "float" in dtype else dtype)))
    x = x.to(getattr(torch, dtype))
    out = tops.flip(x, dims=list(dims))
    assert out.dtype == x.dtype
    # Compared bit for bit (torch.flip has no 8-bit float kernel on every device).
    bits = torch.uint8 if x.element_size() == 1 else torch.int16 if x.element_size() == 2 else None
    if bits is None or dtype == "bool":
        assert torch.equal(out, torch.flip(x, dims))
    else:
        assert torch.equal(out.view(bits), torch.flip(x.view(bits), dims))


def test_torch_schemas_keep_the_spec_types():
    assert str(torch.ops.opgen_ops.glu.default._schema) == \
        'opgen_ops::glu(Tensor x, *, str activation="sigmoid") -> Tensor'
    assert str(torch.ops.opgen_ops.flip.default._schema) == \
        "opgen_ops::flip(Tensor x, *, int[] dims=[-1]) -> Tensor"


def test_torch_opcheck_and_compile(rng):
    x = torch.from_numpy(random(rng, (3, 4, 6), "float32"))
    torch.library.opcheck(torch.ops.opgen_ops.glu.default, (x,), {"activation": "silu"})
    torch.library.opcheck(torch.ops.opgen_ops.flip.default, (x,), {"dims": [-2, -1]})
    f = torch.compile(lambda t: tops.flip(tops.glu(t, activation="gelu"), dims=[-2]) * 2, fullgraph=True)
    want = torch.flip(tops.glu(x, activation="gelu"), (-2,)) * 2
    torch.testing.assert_close(f(x), want)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_an_enum_is_one_string_on_every_route(rng, activation):
    """An enum attribute is vLLM's string choice (docs/spec.md, Attributes):
    the same string through JAX (eager, jit, both api_versions), the torch
    wrapper, torch.ops (the spec's `str` schema) and torch.compile, each
    against the reference; a string outside the values is refused by each
    with one message."""
    x = random(rng, (3, 2, 10), "float32")
    want = ref.glu(x, activation)
    got = {"jax eager": jops.glu(x, activation=activation)}
    for v in (4, 3):
        got[f"jax jit v{v}"] = jax.jit(lambda x, v=v: jops.glu(x, activation=activation, api_version=v))(x)
    t = torch.from_numpy(x)
    got["torch wrapper"] = tops.glu(t, activation=activation)
    got["torch.ops"] = torch.ops.opgen_ops.glu(t, activation=activation)
    got["torch.compile"] = torch.compile(lambda t: torch.ops.opgen_ops.glu(t, activation=activation),
                                         fullgraph=True)(t)
    for route, out in got.items():
        out = out.numpy() if isinstance(out, torch.Tensor) else np.asarray(out)
        assert ref.relative_error(out, want) < ref.TOLERANCE["float32"], route
    message = "glu: attribute 'activation' is 'fp8'; it must be one of sigmoid, gelu, silu"
    for route, call in {"jax": lambda: jops.glu(x, activation="fp8"),
                        "jax jit": lambda: jax.jit(lambda x: jops.glu(x, activation="fp8"))(x),
                        "torch wrapper": lambda: tops.glu(t, activation="fp8"),
                        "torch.ops": lambda: torch.ops.opgen_ops.glu(t, activation="fp8"),
                        "torch.compile": lambda: torch.compile(lambda t: torch.ops.opgen_ops.glu(
                            t, activation="fp8"), fullgraph=True)(t)}.items():
        with pytest.raises(Exception if route == "torch.compile" else ValueError, match=message):
            call()


@pytest.mark.parametrize("call, error, match", [
    (lambda x: jops.glu(x, activation="relu"), ValueError,
     r"glu: attribute 'activation' is 'relu'; it must be one of sigmoid, gelu, silu"),
    (lambda x: jops.glu(x, activation=1), TypeError, r"glu: attribute 'activation' must be a str"),
    (lambda x: jops.flip(x, dims=(0,)), ValueError, r"flip: attribute 'dims' element 0 = 0 must be in \[-2, -1\]"),
    (lambda x: jops.flip(x, dims=-1), TypeError, r"flip: attribute 'dims' must be a sequence of ints, not int"),
    (lambda x: jops.flip(x, dims=(-1.0,)), TypeError, r"flip: attribute 'dims' element 0 must be an int, not float"),
    (lambda x: jops.flip(x, dims=(True,)), TypeError, r"element 0 must be an int, not bool"),
    (lambda x: jops.flip(x, dims="-1"), TypeError, r"must be a sequence of ints, not str"),
    (lambda x: jops.flip(x, dims=np.zeros((1, 1), np.int64)), TypeError, r"must be one-dimensional"),
    (lambda x: tops.glu(torch.from_numpy(np.asarray(x)), activation="tanh"), ValueError, r"must be one of sigmoid, gelu, silu"),
    # (The torch wrapper hands the list to the kernel, whose rules refuse it before the body runs.)
    (lambda x: tops.flip(torch.from_numpy(np.asarray(x)), dims=[2**40]), RuntimeError,
     r"flip: attribute 'dims' element 0 = 1099511627776 must be in"),
])
def test_bad_attribute_values_are_refused_before_the_call(rng, call, error, match):
    with pytest.raises(error, match=match):
        call(random(rng, (2, 4), "float32"))


def test_the_handlers_refuse_a_repeated_axis(rng):
    # The spec makes dims unique: the wrappers refuse a repeated axis at trace
    # time (test_refusals.py), and a raw typed-FFI call meets the handler's check.
    x = jax.device_put(random(rng, (2, 3), "float32"), CPU)
    call = jax.ffi.ffi_call("opgen_ops_flip_ffi", jax.ShapeDtypeStruct(x.shape, x.dtype))
    with pytest.raises(Exception, match=r"flip: attribute 'dims' lists -1 twice"):
        jax.block_until_ready(call(x, dims=np.array([-1, -1], np.int64)))


def test_torch_lowered_kernel_refuses_a_repeated_axis(rng):
    x = torch.from_numpy(random(rng, (2, 3), "float32"))
    with pytest.raises(RuntimeError, match=r"flip: attribute 'dims' lists -2 twice"):
        torch.ops.opgen_ops.flip__lowered(x, dims=torch.tensor([-2, -2]))


def test_torch_lowered_kernel_checks_its_array_tensor(rng):
    x = torch.from_numpy(random(rng, (2, 3), "float32"))
    with pytest.raises(RuntimeError, match=r"attribute 'dims' must arrive as a contiguous 1-D CPU tensor of int64"):
        torch.ops.opgen_ops.flip__lowered(x, dims=torch.tensor([-1], dtype=torch.int32))
    with pytest.raises(RuntimeError, match=r"attribute 'activation' has index 3; it has 3 values \(sigmoid, gelu, silu\)"):
        torch.ops.opgen_ops.glu__lowered(x[:, :2].contiguous(), activation=3)


def test_descriptor_puts_array_elements_after_the_fixed_fields():
    import struct

    blob = _opaque.encode(_ops.flip.OP, dtype_T=_ops.flip.OP.opaque.codes["int32"], batch=2, M=3, N=4, dims=[-2, -1])
    assert len(blob) == _opaque.size(_ops.flip.OP) + 2 * 8
    # header (16), dtype code (1), batch, M, N (i64 each), then the length of dims (u32)
    assert struct.unpack_from("<I", blob, 16 + 1 + 3 * 8) == (2,)
    assert struct.unpack_from("<2q", blob, _opaque.size(_ops.flip.OP)) == (-2, -1)
    assert len(_opaque.encode(_ops.flip.OP, dtype_T=0, batch=1, M=1, N=1, dims=[])) == _opaque.size(_ops.flip.OP)


def test_torch_xla_hlo_of_a_lowered_op(rng):
    torch_xla = pytest.importorskip("torch_xla")
    from test_torch_xla import c_unescape
    import re

    x = torch.from_numpy(random(rng, (2, 3, 4), "float32")).to(torch_xla.device())
    with tops.xla_graph_only():
        out = tops.flip(x, dims=[-2])
        g = tops.glu(x, activation="silu")
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([out, g])
    configs = dict(re.findall(r"custom_call_target=\"(\w+)\", api_version=\w+, backend_config=\"((?:[^\"\\]|\\.)*)\"", hlo))
    code = _ops.flip.OP.opaque.codes["float32"]
    assert c_unescape(configs["opgen_ops_flip_legacy_v3"]) == _opaque.encode(_ops.flip.OP, dtype_T=code, batch=2, M=3, N=4, dims=[-2])
    assert c_unescape(configs["opgen_ops_glu_legacy_v3"]) == _opaque.encode(_ops.glu.OP, dtype_T=code, batch=6, D=4, activation=2)
