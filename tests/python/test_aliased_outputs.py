"""Outputs that alias an input (kv_cache_write's cache_out updates cache in
place) on the CPU: JAX's input_output_aliases (no copy once the input is
donated; the input untouched when it is not), the binding's copy where a
call gives the output its own buffer, PyTorch's mutable schema (Tensor(a!)),
torch.compile's functionalization, and torch_xla's HLO."""

import os

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch

import opgen_ops.jax as jops
import opgen_ops.torch as tops
from opgen_ops import _opaque, _ops

CPU = jax.devices("cpu")[0]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def case(rng, dtype="float32", b=4, s=6, h=10):
    cache = rng.standard_normal((b, s, h)).astype(DTYPES[dtype])
    values = rng.standard_normal((b, h)).astype(DTYPES[dtype])
    # Some positions fall outside [0, s): those sequences are left alone.
    pos = rng.integers(-2, s + 2, b).astype(np.int32)
    want = cache.copy()
    for i, p in enumerate(pos):
        if 0 <= p < s:
            want[i, p] = values[i]
    return cache, values, pos, want


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_writes_the_rows_and_leaves_the_input(rng, dtype, api_version):
    cache, values, pos, want = case(rng, dtype)
    c = jax.device_put(cache, CPU)
    out = jax.jit(lambda c, v, p: jops.kv_cache_write(c, v, p, api_version=api_version))(c, values, pos)
    assert np.array_equal(np.asarray(out), want)
    assert np.array_equal(np.asarray(c), cache), "the input changed although it was not donated"


@pytest.mark.parametrize("api_version", [4, 3])
def test_jax_donated_cache_is_updated_without_a_copy(rng, api_version):
    cache, values, pos, want = case(rng)
    f = jax.jit(lambda c, v, p: jops.kv_cache_write(c, v, p, api_version=api_version), donate_argnums=0)
    c = jax.device_put(cache, CPU)
    hlo = f.lower(c, values, pos).compile().as_text()
    assert "copy(" not in hlo and "copy-start" not in hlo, hlo
    out = f(c, values, pos)
    assert c.is_deleted() and np.array_equal(np.asarray(out), want)


@pytest.mark.parametrize("target, api_version", [("opgen_ops_kv_cache_write_ffi", 4),
                                                 ("opgen_ops_kv_cache_write_legacy_v3", 3)])
def test_binding_copies_the_input_when_the_output_has_its_own_buffer(rng, target, api_version):
    # A raw call without input_output_aliases: XLA gives cache_out a fresh
    # buffer, and the binding must fill it with the cache before the body
    # writes the new rows (else the untouched rows would be garbage).
    cache, values, pos, want = case(rng, b=3, s=40, h=64)
    kwargs = {}
    if api_version == 3:
        kwargs = dict(custom_call_api_version=3, legacy_backend_config=_opaque.encode(_ops.kv_cache_write.OP,
            dtype_T=_ops.flip.OP.opaque.codes["float32"], B=3, S=40, H=64))
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(cache.shape, cache.dtype), **kwargs)
    out = jax.jit(call)(cache, values, pos)
    assert np.array_equal(np.asarray(out), want)


def test_jax_vmaps_sequentially(rng):
    cache, values, pos, _ = case(rng)
    out = jax.vmap(lambda c, v, p: jops.kv_cache_write(c[None], v[None], p[None])[0])(cache, values, pos)
    for i in range(cache.shape[0]):
        np.testing.assert_array_equal(np.asarray(out[i]), case_row(cache[i], values[i], pos[i]))


def case_row(cache, values, p):
    want = cache.copy()
    if 0 <= p < cache.shape[0]:
        want[p] = values
    return want


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_updates_in_place(rng, dtype):
    cache, values, pos, want = case(rng, "float32")
    to = lambda a: torch.from_numpy(a).to(getattr(torch, dtype)) if a.dtype != np.int32 else torch.from_numpy(a)
    tc = to(cache)
    ptr = tc.data_ptr()
    out = tops.kv_cache_write(tc, to(values), to(pos))
    assert out is tc and tc.data_ptr() == ptr
    assert torch.equal(tc, to(want))


def test_torch_schema_opcheck_and_compile(rng):
    assert str(torch.ops.opgen_ops.kv_cache_write.default._schema) == \
        "opgen_ops::kv_cache_write(Tensor(a!) cache, Tensor values, Tensor pos) -> ()"
    cache, values, pos, want = case(rng)
    args = (torch.from_numpy(cache.copy()), torch.from_numpy(values), torch.from_numpy(pos))
    torch.library.opcheck(torch.ops.opgen_ops.kv_cache_write.default, args, {})
    f = torch.compile(lambda c, v, p: tops.kv_cache_write(c, v, p).sum(), fullgraph=True)
    tc = torch.from_numpy(cache.copy())
    total = f(tc, args[1], args[2])
    assert torch.equal(tc, torch.from_numpy(want))
    torch.testing.assert_close(total, torch.from_numpy(want).sum(), rtol=1e-4, atol=1e-4)  # summation order may differ


def test_torch_refuses_a_cache_it_cannot_update_in_place(rng):
    cache, values, pos, _ = case(rng)
    tc = torch.from_numpy(cache).transpose(0, 1)  # not contiguous
    with pytest.raises(RuntimeError, match=r"kv_cache_write: input 'cache' is updated in place, and the spec's layout "
                                           r"for it is contiguous"):
        tops.kv_cache_write(tc, torch.from_numpy(values[:6]), torch.zeros(6, dtype=torch.int32))


def test_jax_checks_shapes_before_the_call(rng):
    cache, values, pos, _ = case(rng)
    with pytest.raises(ValueError, match=r"kv_cache_write: input 'values' has shape \[4, 9\]; dimension 1 must be 10 \(H, "):
        jops.kv_cache_write(cache, values[:, :9], pos)
    # (int64 under jax_enable_x64: without it JAX hands the custom call int32, test_jax_x64.py.)
    with jax.enable_x64(True), pytest.raises(TypeError, match=r"input 'pos' has dtype int64; the spec declares int32"):
        jops.kv_cache_write(cache, values, pos.astype(np.int64))


def test_torch_xla_hlo_and_in_place_contract(rng):
    torch_xla = pytest.importorskip("torch_xla")
    import re

    cache, values, pos, _ = case(rng)
    dev = torch_xla.device()
    tc = torch.from_numpy(cache).to(dev)
    with tops.xla_graph_only():
        out = tops.kv_cache_write(tc, torch.from_numpy(values).to(dev), torch.from_numpy(pos).to(dev))
    assert out is tc
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([tc])
    calls = re.findall(r"custom-call\((.*?)\), custom_call_target=\"opgen_ops_kv_cache_write_legacy_v3\"", hlo)
    assert len(calls) == 1 and calls[0].count("%") == 3, hlo
