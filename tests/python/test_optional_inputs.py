"""Optional inputs (rms_norm's weight and bias) on the CPU: every presence
combination through JAX (typed FFI: the remaining operands and a presence
mask; legacy: the mask in the descriptor) and PyTorch (`Tensor?`), the
errors when an optional input is wrong, and the raw handler's mask checks."""

import os

os.environ.setdefault("PJRT_DEVICE", "CPU")

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import opgen_ops.jax as jops
import opgen_ops.torch as tops
from opgen_ops import _opaque, _ops
import op_references as ref

CPU = jax.devices("cpu")[0]
PRESENCE = list(itertools.product([False, True], repeat=2))  # (weight given, bias given)


def inputs(rng, shape, weight, bias):
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape[-1:]).astype(np.float32) if weight else None
    b = rng.standard_normal(shape[-1:]).astype(np.float32) if bias else None
    return x, w, b


@pytest.mark.parametrize("weight, bias", PRESENCE)
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_every_presence_combination(rng, weight, bias, api_version):
    x, w, b = inputs(rng, (3, 4, 32), weight, bias)
    eps = float(rng.uniform(1e-6, 1e-3))
    out, rstd = jax.jit(lambda x, w, b: jops.rms_norm(x, w, b, eps=eps, api_version=api_version))(x, w, b)
    want, want_rstd = ref.rms_norm(x, w, eps, bias=b)
    assert ref.relative_error(out, want) < 1e-5
    assert ref.relative_error(rstd, want_rstd) < 1e-5


def test_jax_bias_alone_by_keyword(rng):
    x, _, b = inputs(rng, (5, 16), False, True)
    out, _ = jops.rms_norm(x, bias=b)
    assert ref.relative_error(out, ref.rms_norm(x, None, 1e-6, bias=b)[0]) < 1e-5


def test_jax_operands_are_only_the_given_inputs(rng):
    x, _, b = inputs(rng, (5, 16), False, True)
    text = jax.jit(lambda x, b: jops.rms_norm(x, bias=b)).lower(x, b).as_text()
    call = next(line for line in text.splitlines() if "stablehlo.custom_call @opgen_ops_rms_norm_ffi" in line)
    assert call.count("%arg") == 2 and "present_ = 2" in call, call


def test_jax_vmap_with_an_absent_input(rng):
    x, w, _ = inputs(rng, (4, 3, 16), True, False)
    out, _ = jax.vmap(lambda x: jops.rms_norm(x, w))(x)
    assert ref.relative_error(out, ref.rms_norm(x, w, 1e-6)[0]) < 1e-5


@pytest.mark.parametrize("weight, bias", PRESENCE)
def test_torch_every_presence_combination(rng, weight, bias):
    x, w, b = inputs(rng, (2, 3, 24), weight, bias)
    t = lambda a: None if a is None else torch.from_numpy(a)
    out, rstd = tops.rms_norm(t(x), t(w), t(b), eps=1e-5)
    want, want_rstd = ref.rms_norm(x, w, 1e-5, bias=b)
    assert ref.relative_error(out.numpy(), want) < 1e-5
    assert ref.relative_error(rstd.numpy(), want_rstd) < 1e-5
    torch.library.opcheck(torch.ops.opgen_ops.rms_norm.default, (t(x), t(w), t(b)), {"eps": 1e-5})


def test_torch_schema_and_compile(rng):
    assert str(torch.ops.opgen_ops.rms_norm.default._schema).startswith(
        "opgen_ops::rms_norm(Tensor x, Tensor? weight=None, Tensor? bias=None, *, float eps=")
    x, _, b = (torch.from_numpy(a) if a is not None else None for a in inputs(rng, (4, 8), False, True))
    f = torch.compile(lambda x, b: tops.rms_norm(x, bias=b)[0] * 2, fullgraph=True)
    torch.testing.assert_close(f(x, b), tops.rms_norm(x, None, b)[0] * 2)


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_a_given_optional_input_is_checked(rng, framework):
    x, w, _ = inputs(rng, (3, 8), True, False)
    if framework == "jax":
        with pytest.raises(ValueError, match=r"rms_norm: input 'bias' has shape \[7\]; dimension 0 must be 8 \(D, "):
            jops.rms_norm(x, w, np.zeros(7, np.float32))
        with pytest.raises(TypeError, match=r"rms_norm: input 'bias' has dtype float16, but its dtype T is float32"):
            jops.rms_norm(x, None, np.zeros(8, np.float16))
    else:
        tx = torch.from_numpy(x)
        with pytest.raises(RuntimeError, match=r"rms_norm: input 'bias' has shape \[7\]"):
            tops.rms_norm(tx, None, torch.zeros(7))
        with pytest.raises(RuntimeError, match=r"rms_norm: input 'weight' has dtype float16"):
            tops.rms_norm(tx, torch.zeros(8, dtype=torch.float16))


@pytest.mark.parametrize("present, operands, match", [
    (1, 0, r"the presence mask names 1 optional input\(s\), but 0 operand\(s\) follow the required inputs"),
    (0, 1, r"the presence mask names 0 optional input\(s\), but 1 operand\(s\)"),
    (4, 1, r"the presence mask 4 names inputs beyond the op's 2 optional input\(s\)"),
    (-1, 2, r"the presence mask -1 names inputs beyond"),
])
def test_raw_handler_checks_the_presence_mask(rng, present, operands, match):
    x = jax.device_put(rng.standard_normal((2, 8)).astype(np.float32), CPU)
    extra = [jax.device_put(np.ones(8, np.float32), CPU)] * operands
    call = jax.ffi.ffi_call("opgen_ops_rms_norm_ffi",
                            (jax.ShapeDtypeStruct((2, 8), jnp.float32), jax.ShapeDtypeStruct((2,), jnp.float32)))
    with pytest.raises(Exception, match=match):
        jax.block_until_ready(call(x, *extra, eps=np.float32(1e-6), present_=np.int64(present)))


def test_descriptor_carries_the_mask(rng):
    blob = _opaque.encode(_ops.rms_norm.OP, dtype_T=2, present_=2, batch=3, D=8, eps=1e-6)
    assert blob[17:21] == (2).to_bytes(4, "little")


def test_torch_xla_hlo_passes_only_given_inputs(rng):
    torch_xla = pytest.importorskip("torch_xla")
    import re
    from test_torch_xla import c_unescape

    dev = torch_xla.device()
    x = torch.from_numpy(rng.standard_normal((3, 8)).astype(np.float32)).to(dev)
    b = torch.from_numpy(rng.standard_normal(8).astype(np.float32)).to(dev)
    with tops.xla_graph_only():
        out, _ = tops.rms_norm(x, None, b, eps=1e-5)
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([out])
    operands, config = re.findall(r"custom-call\((.*?)\), custom_call_target=\"opgen_ops_rms_norm_legacy_v3\", "
                                  r"api_version=\w+, backend_config=\"((?:[^\"\\]|\\.)*)\"", hlo)[0]
    assert re.fullmatch(r"f32\[3,8\]\{1,0\} %\S+, f32\[8\]\{0\} %\S+", operands), operands
    assert c_unescape(config) == _opaque.encode(_ops.rms_norm.OP, dtype_T=_ops.flip.OP.opaque.codes["float32"], present_=2,
                                                         batch=3, D=8, eps=1e-5)


def test_required_input_cannot_be_none():
    with pytest.raises(TypeError, match=r"rms_norm: input 'x' is required, not None"):
        jops.rms_norm(None, np.ones(8, np.float32))


def test_torch_inputs_on_two_devices_are_refused(rng):
    # CPU and meta tensors together reach the fake kernel (Meta), which must
    # not return an uninitialized CPU tensor.
    x = torch.from_numpy(rng.standard_normal((2, 8)).astype(np.float32))
    with pytest.raises(RuntimeError, match=r"rms_norm: input 'weight' is on meta, but input 'x' is on cpu"):
        tops.rms_norm(x, torch.ones(8, device="meta"))
    cache = torch.zeros(2, 3, 4)
    with pytest.raises(RuntimeError, match=r"kv_cache_write: input 'values' is on meta"):
        tops.kv_cache_write(cache, torch.ones(2, 4, device="meta"), torch.zeros(2, dtype=torch.int32))
