"""No silent wrong results: every input an op refuses is refused where the
caller is, with a message that names the op and the argument; a legacy call
that is refused anyway (through a raw ffi_call) leaves poison in its outputs,
never stale memory; output sizes never overflow; torch refuses tensors that
share memory with one it updates in place, attribute tensors on another
device, and None for a tensor.

The sweep over every op's refusals runs each through every api_version the op
lists that runs here (XLA:CPU runs 4 and 3)."""

import os
import re

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import opgen_ops.jax as jops
import opgen_ops.torch as tops
from opgen_ops import _C, _opaque, _ops, _spec

CPU = jax.devices("cpu")[0]


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# (op, case name, the wrapper's arguments built from rng, the message of the refusal). Every
# entry point asks the op's one set of C++ rules (the JAX wrapper at trace time through _C.check,
# the torch kernel on the buffers), so the messages are the same text; only an argument of the
# wrong Python type is refused before the rules, by each framework in its own words (the last
# element: torch's, where it differs).
REFUSALS = [
    ("simple_add", "alpha too large", lambda r: ((f32(r, 8), f32(r, 8)), {"alpha": 1e39}),
     r"alpha' = 1e\+39 does not fit f32", None),
    ("simple_add", "alpha not a float", lambda r: ((f32(r, 8), f32(r, 8)), {"alpha": "2"}),
     r"alpha' must be a float", r"'alpha'"),
    ("simple_add", "shapes differ", lambda r: ((f32(r, 8), f32(r, 7)), {}),
     r"input 'b' has shape \[7\]; dimension 0 must be 8 \(N, bound by input 'a' dimension 0\)", None),
    ("simple_add", "dtype", lambda r: ((f32(r, 8), np.arange(8, dtype=np.int32)), {}),
     r"input 'b' has dtype int32", None),
    ("rms_norm", "eps negative", lambda r: ((f32(r, 2, 8),), {"eps": -1.0}),
     r"eps' = -1.0 must be > 0.0", None),
    ("rms_norm", "eps nan", lambda r: ((f32(r, 2, 8),), {"eps": float("nan")}),
     r"eps' = nan is not finite", None),
    ("rms_norm", "weight shape", lambda r: ((f32(r, 2, 8), f32(r, 7)), {}),
     r"input 'weight' has shape \[7\]", None),
    ("glu", "odd width", lambda r: ((f32(r, 2, 9),), {}),
     r"output 'out' is declared \[\.\.\., D/2\], but 9 is not divisible by 2", None),
    ("glu", "unknown activation", lambda r: ((f32(r, 2, 8),), {"activation": "tanh"}),
     r"'activation' is 'tanh'", None),
    ("flip", "axis twice", lambda r: ((f32(r, 2, 3),), {"dims": (-1, -1)}),
     r"'dims' lists -1 twice \(element 0 and element 1\)", None),
    ("flip", "axis out of range", lambda r: ((f32(r, 2, 3),), {"dims": (-3,)}),
     r"'dims' element 0 = -3 must be in", None),
    # A 0-d input is checked against the spec's rank like any other (its empty shape once passed
    # for a legacy call's, unchecked: the v3 kernel read past the one element).
    ("simple_add", "0-d input", lambda r: ((f32(r, 8), f32(r)), {}), r"input 'b' has rank 0", None),
    ("rms_norm", "0-d weight", lambda r: ((f32(r, 3, 5), f32(r)), {}), r"input 'weight' has rank 0", None),
    ("softmax", "0-d input", lambda r: ((f32(r),), {}), r"input 'x' has rank 0", None),
    ("kv_cache_write", "positions dtype", lambda r: ((f32(r, 2, 4, 3), f32(r, 2, 3), np.zeros(2, np.float32)), {}),
     r"input 'pos' has dtype float32", None),
    ("kv_cache_write", "values width", lambda r: ((f32(r, 2, 4, 3), f32(r, 2, 5), np.zeros(2, np.int32)), {}),
     r"dimension 1 must be 3 \(H, bound by input 'cache' dimension 2\)", None),
]
IDS = [f"{case[0]}-{case[1]}" for case in REFUSALS]


def cpu_versions(op):
    return [v for v in getattr(_ops, op).OP.api_versions if v in (4, 3)]


def jax_refusal(op, inputs, attrs, api_version=4):
    fn = lambda *xs: getattr(jops, op)(*xs, **attrs, api_version=api_version)  # noqa: E731
    # .trace() runs the wrapper and nothing of XLA: the refusal happens there.
    with pytest.raises((TypeError, ValueError)) as e:
        jax.jit(fn).trace(*inputs)
    return str(e.value)


def torch_refusal(op, inputs, attrs):
    with pytest.raises(RuntimeError) as e:
        getattr(tops, op)(*[torch.from_numpy(x) for x in inputs], **attrs)
    return str(e.value)


@pytest.mark.parametrize("op, name, make, match, torch_match", REFUSALS, ids=IDS)
def test_every_refusal_comes_at_trace_time_for_every_api_version(rng, op, name, make, match, torch_match):
    inputs, attrs = make(rng)
    for api_version in cpu_versions(op):
        assert re.search(match, jax_refusal(op, inputs, attrs, api_version))


@pytest.mark.parametrize("op, name, make, match, torch_match", REFUSALS, ids=IDS)
def test_torch_refuses_the_same(rng, op, name, make, match, torch_match):
    inputs, attrs = make(rng)
    assert re.search(torch_match or match, torch_refusal(op, inputs, attrs))


def without_hint(message):
    """A dtype message without the conversion it suggests, which names the framework's own call."""
    return re.sub(r" \(convert it explicitly, e\.g\. [^)]*\)\)$", "", message)


@pytest.mark.parametrize("op, name, make, match, torch_match", [c for c in REFUSALS if c[4] is None],
                         ids=[i for i, c in zip(IDS, REFUSALS) if c[4] is None])
def test_every_entry_point_gives_the_one_message(rng, op, name, make, match, torch_match):
    # The JAX wrapper's refusal at trace time, the torch kernel's on the buffers and _C.check's are
    # one text, word for word (but the conversion a dtype message suggests): one routine wrote it.
    inputs, attrs = make(rng)
    jax_message = jax_refusal(op, inputs, attrs)
    assert without_hint(jax_message) == without_hint(torch_refusal(op, inputs, attrs))
    described = getattr(_ops, op).OP
    checked = [None if x is None else (x.dtype.name, x.shape) for x in inputs]
    checked += [None] * (len(described.inputs) - len(checked))
    values = [_spec.check_attr(op, a, attrs.get(a.name, a.default)) for a in described.attrs]
    with pytest.raises((TypeError, ValueError)) as e:
        _C.check(op, checked, values, 0, "jax", "cpu")
    assert str(e.value) == jax_message


# --- A refused legacy call leaves poison, never stale memory -----------------------------------


def raw_legacy(op, blob, operands, results):
    return jax.ffi.ffi_call(getattr(_ops, op).OP.ffi_target.replace("_ffi", "_legacy_v3"), results,
                            custom_call_api_version=3, legacy_backend_config=blob)(
        *[jax.device_put(x, CPU) for x in operands])


def poisoned(x):
    """Every byte 0xFF, as opgen/platform.h's kPoisonByte."""
    raw = np.asarray(x).view(np.uint8)
    return raw.size > 0 and bool(np.all(raw == 0xFF))


def test_a_refused_legacy_call_fills_its_outputs_with_poison(rng, capfd):
    flip = _ops.flip.OP
    for dtype in ("float32", "int32"):
        x = f32(rng, 2, 3, 4).astype(dtype)
        blob = _opaque.encode(flip, dtype_T=flip.opaque.codes[dtype], batch=2, M=3, N=4, dims=[-1, -1])
        out = raw_legacy("flip", blob, [x], jax.ShapeDtypeStruct(x.shape, dtype))
        out = np.asarray(out[0])
        assert poisoned(out), out
        if dtype == "float32":
            assert np.all(np.isnan(out))
        else:
            assert np.all(out == -1)
    norm = _ops.rms_norm.OP
    x = f32(rng, 3, 8)
    blob = _opaque.encode(norm, dtype_T=norm.opaque.codes["float32"], present_=0, batch=3, D=8, eps=-1.0)
    out, rstd = raw_legacy("rms_norm", blob, [x], [jax.ShapeDtypeStruct((3, 8), jnp.float32),
                                                    jax.ShapeDtypeStruct((3,), jnp.float32)])
    assert poisoned(out) and poisoned(rstd)
    glu = _ops.glu.OP
    blob = _opaque.encode(glu, dtype_T=glu.opaque.codes["float32"], batch=3, D=8, activation=7)
    out = raw_legacy("glu", blob, [x], jax.ShapeDtypeStruct((3, 4), jnp.float32))
    assert poisoned(out[0])
    # The error cannot reach XLA (jaxlib exports no status setter): the report on stderr says so.
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("opgen: the kernel")]
    assert said == ["opgen: the kernel was not run; the call's outputs hold poison (every byte 0xFF: NaN in "
                    "floating types, -1 in integers) where the descriptor gave their sizes; XLA's status setter "
                    "is not exported in this process, so the error cannot reach the framework (use "
                    "api_version 4)"] * 4, said


# --- The typed FFI checks what it is handed ----------------------------------------------------


def raw_ffi(results, *operands, **attrs):
    return jax.ffi.ffi_call("opgen_ops_simple_add_ffi", results)(*[jax.device_put(x, CPU) for x in operands], **attrs)


def test_a_raw_typed_call_with_missing_operands_or_results_is_an_error(rng):
    a = f32(rng, 8)
    one = jax.ShapeDtypeStruct((8,), jnp.float32)
    with pytest.raises(Exception, match="(?i)argument"):
        jax.block_until_ready(raw_ffi(one, a, alpha=np.float32(1)))
    with pytest.raises(Exception, match="(?i)(result|ret)"):
        jax.block_until_ready(raw_ffi([one, one], a, a, alpha=np.float32(1)))
    with pytest.raises(Exception, match="(?i)attr"):
        jax.block_until_ready(raw_ffi(one, a, a))


def test_an_unsupported_xla_dtype_is_named(rng):
    a = f32(rng, 8)
    with pytest.raises(Exception, match="input 'b' has dtype i16; the spec declares f32"):
        jax.block_until_ready(raw_ffi(jax.ShapeDtypeStruct((8,), jnp.float32), a, a.astype(np.int16),
                                      alpha=np.float32(1)))


# --- Output sizes never overflow ---------------------------------------------------------------
# (The rules of output and workspace expressions -- overflow, inexact and zero division, negative
# sizes, attributes in them -- are the generated C++ checks, tested in tests/cpp/golden_test.cc.)


def test_a_huge_batch_of_nothing_is_an_empty_result():
    x = torch.empty(2, 2**62, 0, 1)
    out, rstd = tops.rms_norm(x)
    assert out.shape == x.shape and rstd.shape == (2, 2**62, 0)


# --- torch: mixed devices, shared memory, None ------------------------------------------------


def test_a_meta_attribute_tensor_beside_cpu_inputs_is_refused(rng):
    x = torch.from_numpy(f32(rng, 2, 3))
    with pytest.raises(RuntimeError, match=r"attribute 'dims' must arrive as a CPU tensor, not on meta"):
        torch.ops.opgen_ops.flip__lowered(x, dims=torch.tensor([-1]).to("meta"))


def test_an_input_sharing_memory_with_the_updated_one_is_refused():
    cache = torch.zeros(4, 6, 10)
    values = cache.view(-1)[5:45].view(4, 10)  # rows of the cache itself
    with pytest.raises(RuntimeError, match=r"kv_cache_write: input 'values' shares memory with input 'cache', which "
                                           r"the op updates in place"):
        tops.kv_cache_write(cache, values, torch.zeros(4, dtype=torch.int32))
    # A tensor beside it in one allocation, not overlapping, is fine.
    storage = torch.zeros(4 * 6 * 10 + 40)
    cache, values = storage[:240].view(4, 6, 10), storage[240:].view(4, 10)
    values.copy_(torch.arange(40.0).view(4, 10))
    tops.kv_cache_write(cache, values, torch.zeros(4, dtype=torch.int32))
    assert torch.equal(cache[:, 0], values)


def test_none_for_a_tensor_names_the_input(rng):
    x = torch.from_numpy(f32(rng, 8))
    with pytest.raises(TypeError, match=r"simple_add: input 'a' is required, not None"):
        tops.simple_add(None, x)
    with pytest.raises(RuntimeError, match=r"simple_add: input 'a' is required, not None"):
        torch.ops.opgen_ops.simple_add(None, x)
    # JAX, eager and jitted (an eager call once recursed without end here: issue 37's differential test).
    for call in (jops.softmax, jax.jit(jops.softmax)):
        with pytest.raises(TypeError, match=r"softmax: input 'x' is required, not None"):
            call(None)


# --- JAX: api_version must be a version --------------------------------------------------------


@pytest.mark.parametrize("bad", [3.0, True, "4", None])
def test_api_version_must_be_an_int(rng, bad):
    x = f32(rng, 8)
    with pytest.raises(TypeError, match=r"simple_add: api_version must be an int, one of 4, 3, 2, 1; not"):
        jops.simple_add(x, x, api_version=bad)


def test_a_workspace_whose_size_overflows_is_refused_before_any_size_is_computed():
    # Zero sequences with a block table of 2^59 columns: the workspaces'
    # (MB*BS+255)//256 overflows int64. The refusal must come from the checked
    # arithmetic alone (the sanitizer run aborts on any plain int64 overflow).
    query = torch.empty(0, 4, 64)
    cache = torch.empty(1, 16, 4, 64)
    tables = torch.empty(0, 2**59, dtype=torch.int32)
    with pytest.raises(RuntimeError, match=r"workspace 'partial_out' has a dimension \(MB\*BS\+255\)//256 that "
                                           r"overflows int64"):
        tops.paged_attention_decode(query, cache, cache, tables, torch.empty(0, dtype=torch.int32), scale=0.125)


def machine_memory():
    """The CPU's RAM and swap, in bytes, as /proc/meminfo gives them."""
    kib = dict(re.findall(r"^(\w+):\s+(\d+) kB$", open("/proc/meminfo").read(), re.MULTILINE))
    return (int(kib["MemTotal"]) + int(kib["SwapTotal"])) * 1024


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="reads the machine's memory from /proc/meminfo")
def test_a_torch_output_larger_than_the_machine_is_refused_by_opgen_alone(capfd):
    # rms_norm_backward of no rows of 2^50 channels: the inputs hold no element, grad_weight and
    # grad_bias would take 2^53 bytes each (9 PB). The kernel refuses the first before torch's
    # allocator is asked, whose failure prints a C++ stack trace on stderr beside the error.
    d = 2**50
    grad_out, x = torch.empty(0, d, dtype=torch.float64), torch.empty(0, d, dtype=torch.float64)
    message = (f"rms_norm_backward: output 'grad_weight' [D] of shape [{d}] and dtype float64 would take "
               f"{8 * d} bytes, more than the {machine_memory()} bytes of memory cpu has")
    with pytest.raises(RuntimeError) as kernel_error:
        torch.ops.opgen_ops.rms_norm_backward(grad_out, x, None, None)
    assert str(kernel_error.value) == message
    with pytest.raises(RuntimeError) as wrapper_error:  # the direct route (the eager one where torch has it)
        tops.rms_norm_backward(grad_out, x)
    assert str(wrapper_error.value) == message
    assert capfd.readouterr().err == ""


def test_jax_refuses_an_output_of_more_than_2_63_bytes_at_trace_time():
    # 2^62 f32 elements fit int64, their 2^64 bytes do not: XLA would abort
    # the process ("overflow in static extent product").
    x = jax.ShapeDtypeStruct((2**62,), jnp.float32)
    with pytest.raises(ValueError, match=r"simple_add: output 'out' \[N\] of shape \[4611686018427387904\] and "
                                         r"dtype float32 would take 18446744073709551616 bytes, more than 2\^63 - 1"):
        jax.jit(lambda a, b: jops.simple_add(a, b)).trace(x, x)


def test_a_required_attribute_is_named():
    with pytest.raises(TypeError, match=r"topk_softmax: attribute 'topk' is required"):
        _spec.check(_ops.topk_softmax.OP, [np.zeros((3, 5), np.float32)], {})


def test_the_rules_size_outputs_and_workspaces():
    # Outputs and workspaces as the rules size them, and the symbols as the inputs bind them.
    op = _ops.paged_attention_decode.OP
    S, H, KVH, Dh, NB, BS, MB = 3, 4, 2, 64, 5, 16, 40
    x = jax.ShapeDtypeStruct
    call = _spec.check(op, [x((S, H, Dh), jnp.float32), x((NB, BS, KVH, Dh), jnp.float32),
                            x((NB, BS, KVH, Dh), jnp.float32), x((S, MB), jnp.int32), x((S,), jnp.int32),
                            None, None],  # no k_scale, v_scale
                       {"scale": 0.125})
    assert call.output_shapes == ((S, H, Dh),)
    chunks = (MB * BS + 255) // 256
    assert call.workspace_shapes == ((S, H, chunks, Dh), (S, H, chunks), (S, H, chunks))
    assert call.symbols == {"S": S, "H": H, "Dh": Dh, "NB": NB, "BS": BS, "KVH": KVH, "MB": MB}


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="reads the machine's memory from /proc/meminfo")
def test_an_output_larger_than_the_machine_is_named_by_op_and_buffer(capfd):
    # A broadcast query (its layout takes any row strides) of 2^22 sequences
    # by 2^16 heads asks for a 256 TiB output, more than the machine has: the
    # kernel refuses it before torch's allocator is asked (whose C shim would
    # log its exception, a C++ stack trace, to stderr), naming the op and the output.
    s, h = 2**22, 2**16
    query = torch.zeros(1, 1, 256).expand(s, h, 256)
    cache = torch.zeros(1, 16, 1, 256)
    tables, lengths = torch.zeros(s, 1, dtype=torch.int32), torch.zeros(s, dtype=torch.int32)
    with pytest.raises(RuntimeError) as e:
        tops.paged_attention_decode(query, cache, cache, tables, lengths, scale=0.1)
    assert str(e.value) == (f"paged_attention_decode: output 'out' [S, H, Dh] of shape [{s}, {h}, 256] and dtype "
                            f"float32 would take {s * h * 256 * 4} bytes, more than the {machine_memory()} bytes "
                            "of memory cpu has")
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("dtype", [torch.int16, torch.uint16, torch.complex64])
def test_torch_names_a_dtype_opgen_does_not_take(dtype):
    a = torch.zeros(8, dtype=dtype)
    name = str(dtype).removeprefix("torch.")
    for fn in (torch.ops.opgen_ops.simple_add, tops.simple_add):
        with pytest.raises(RuntimeError, match=rf"simple_add: input 'a' has dtype {name}"):
            fn(a, a)
