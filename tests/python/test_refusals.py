"""No silent wrong results: every input an op refuses is refused where the
caller is, with a message that names the op and the argument; a legacy call
that is refused anyway (through a raw ffi_call) leaves poison in its outputs,
never stale memory; output sizes never overflow; torch refuses tensors that
share memory with one it updates in place, attribute tensors on another
device, and None for a tensor.

The sweep over every op's refusals runs each through every api_version the op
lists that runs here (XLA:CPU runs 4 and 3)."""

import os

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import opgen_ops.jax as jops
import opgen_ops.torch as tops
from opgen_ops import _opaque, _ops, _spec

CPU = jax.devices("cpu")[0]


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# (op, case name, the wrapper's arguments built from rng, the message of the JAX wrapper's refusal,
# the message of the torch kernel's: the C++ kernels spell shapes as C++ does, [7], and torch
# itself refuses an argument of the wrong Python type)
REFUSALS = [
    ("simple_add", "alpha too large", lambda r: ((f32(r, 8), f32(r, 8)), {"alpha": 1e39}),
     r"alpha' = 1e\+39 does not fit f32", r"alpha' = .* does not fit f32"),
    ("simple_add", "alpha not a float", lambda r: ((f32(r, 8), f32(r, 8)), {"alpha": "2"}),
     r"alpha' must be a float", r"'alpha'"),
    ("simple_add", "shapes differ", lambda r: ((f32(r, 8), f32(r, 7)), {}),
     r"input 'b' has shape \(7,\); dimension 0 must be N = 8", r"input 'b' has shape \[7\]; dimension 0 must be 8"),
    ("simple_add", "dtype", lambda r: ((f32(r, 8), np.arange(8, dtype=np.int32)), {}),
     r"input 'b' has dtype int32", r"input 'b' has dtype int32"),
    ("rms_norm", "eps negative", lambda r: ((f32(r, 2, 8),), {"eps": -1.0}),
     r"eps' = -1.0 must be > 0.0", r"eps' = -1.0 must be > 0.0"),
    ("rms_norm", "eps nan", lambda r: ((f32(r, 2, 8),), {"eps": float("nan")}),
     r"eps' = nan is not finite", r"eps' = nan is not finite"),
    ("rms_norm", "weight shape", lambda r: ((f32(r, 2, 8), f32(r, 7)), {}),
     r"input 'weight' has shape \(7,\)", r"input 'weight' has shape \[7\]"),
    ("glu", "odd width", lambda r: ((f32(r, 2, 9),), {}),
     r"output 'out' is declared \[\.\.\., D/2\], but 9 is not divisible by 2",
     r"output 'out' is declared \[\.\.\., D/2\], but 9 is not divisible by 2"),
    ("glu", "unknown activation", lambda r: ((f32(r, 2, 8),), {"activation": "tanh"}),
     r"'activation' is 'tanh'", r"'activation' is 'tanh'"),
    ("flip", "axis twice", lambda r: ((f32(r, 2, 3),), {"dims": (-1, -1)}),
     r"'dims' lists -1 twice \(element 0 and element 1\)", r"'dims' lists -1 twice \(element 0 and element 1\)"),
    ("flip", "axis out of range", lambda r: ((f32(r, 2, 3),), {"dims": (-3,)}),
     r"'dims' element 0 = -3 must be in", r"'dims' element 0 = -3 must be in"),
    ("kv_cache_write", "positions dtype", lambda r: ((f32(r, 2, 4, 3), f32(r, 2, 3), np.zeros(2, np.float32)), {}),
     r"input 'pos' has dtype float32", r"input 'pos' has dtype float32"),
    ("kv_cache_write", "values width", lambda r: ((f32(r, 2, 4, 3), f32(r, 2, 5), np.zeros(2, np.int32)), {}),
     r"dimension 1 must be H = 3", r"dimension 1 must be 3 \(H, bound by input 'cache' dimension 2\)"),
]
IDS = [f"{case[0]}-{case[1]}" for case in REFUSALS]


def cpu_versions(op):
    return [v for v in getattr(_ops, op).OP.api_versions if v in (4, 3)]


@pytest.mark.parametrize("op, name, make, match, torch_match", REFUSALS, ids=IDS)
def test_every_refusal_comes_at_trace_time_for_every_api_version(rng, op, name, make, match, torch_match):
    inputs, attrs = make(rng)
    for api_version in cpu_versions(op):
        fn = lambda *xs: getattr(jops, op)(*xs, **attrs, api_version=api_version)  # noqa: E731
        # .trace() runs the wrapper and nothing of XLA: the refusal happens there.
        with pytest.raises((TypeError, ValueError), match=match):
            jax.jit(fn).trace(*inputs)


@pytest.mark.parametrize("op, name, make, match, torch_match", REFUSALS, ids=IDS)
def test_torch_refuses_the_same(rng, op, name, make, match, torch_match):
    inputs, attrs = make(rng)
    with pytest.raises(RuntimeError, match=torch_match):
        getattr(tops, op)(*[torch.from_numpy(x) for x in inputs], **attrs)


# --- A refused legacy call leaves poison, never stale memory -----------------------------------


def raw_legacy(op, blob, operands, results):
    return jax.ffi.ffi_call(getattr(_ops, op).OP.ffi_target.replace("_ffi", "_legacy_v3"), results,
                            custom_call_api_version=3, legacy_backend_config=blob)(
        *[jax.device_put(x, CPU) for x in operands])


def poisoned(x):
    """Every byte 0xFF, as opgen/platform.h's kPoisonByte."""
    raw = np.asarray(x).view(np.uint8)
    return raw.size > 0 and bool(np.all(raw == 0xFF))


def test_a_refused_legacy_call_fills_its_outputs_with_poison(rng):
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


def expr_op(*outputs):
    """An op over x [..., D] with the given output dimension expressions."""
    return _spec.Op(
        package="t", name="shapes", inputs=(_spec.Tensor("x", "float32", ("D",), batch=True),),
        outputs=tuple(_spec.Tensor(f"o{i}", "float32", (d,), batch=True) for i, d in enumerate(outputs)))


class Shaped:
    def __init__(self, *shape):
        self.shape, self.dtype = shape, np.dtype("float32")


@pytest.mark.parametrize("tree, text, d, match", [
    (("*", ("*", ("*", ("*", "D", "D"), "D"), "D"), "D"), "D*D*D*D*D", 8192, "has a dimension D\\*D\\*D\\*D\\*D that overflows int64"),
    (("*", ("*", ("*", ("*", "D", "D"), "D"), "D"), "D"), "D*D*D*D*D", 7000, "overflows int64"),
    (("-", "D", 5), "D-5", 4, r"has a dimension D-5 = -1 < 0"),
    (("/", "D", ("-", "D", "D")), "D/(D-D)", 4, r"but 4 is not divisible by 0"),
    (("//", "D", ("-", "D", "D")), "D//(D-D)", 4, r"but 4 is not divisible by 0"),
    (("//", ("-", "D", 7), 2), "(D-7)//2", 5, r"has a dimension \(D-7\)//2 = -1 < 0"),  # rounds down, not to 0
])
def test_output_expressions_are_checked(tree, text, d, match):
    op = expr_op(_spec.Expr(text, tree))
    with pytest.raises(ValueError, match=match):
        _spec.check(op, [Shaped(d)], {})


def test_floor_division_rounds_down_as_python_does():
    op = expr_op(_spec.Expr("(D+3)//4", ("//", ("+", "D", 3), 4)))
    assert [_spec.check(op, [Shaped(d)], {}).output_shapes for d in (1, 5, 13)] == [((1,),), ((2,),), ((4,),)]


def test_an_output_of_more_than_2_63_elements_is_refused():
    op = expr_op(_spec.Expr("2*D", ("*", 2, "D")))
    assert _spec.check(op, [Shaped(2**20, 2**30)], {}).output_shapes == ((2**20, 2**31),)
    with pytest.raises(ValueError, match=r"output 'o0' \[\.\.\., 2\*D\] of shape .* would take \d+ bytes, "
                                         r"more than 2\^63 - 1"):
        _spec.check(op, [Shaped(2**40, 2**30)], {})


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
    with pytest.raises(RuntimeError, match=r"simple_add: input 'a' is None \(an undefined tensor\)"):
        torch.ops.opgen_ops.simple_add(None, x)


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


def test_jax_refuses_an_output_of_more_than_2_63_bytes_at_trace_time():
    # 2^62 f32 elements fit int64, their 2^64 bytes do not: XLA would abort
    # the process ("overflow in static extent product").
    x = jax.ShapeDtypeStruct((2**62,), jnp.float32)
    with pytest.raises(ValueError, match=r"simple_add: output 'out' \[N\] of shape \(4611686018427387904,\) and "
                                         r"dtype float32 would take 18446744073709551616 bytes, more than 2\^63 - 1"):
        jax.jit(lambda a, b: jops.simple_add(a, b)).trace(x, x)


def test_a_negative_attribute_sized_workspace_is_refused_by_name():
    op = _spec.Op(
        package="t", name="scratchy", inputs=(_spec.Tensor("x", "float32", ("D",)),),
        outputs=(_spec.Tensor("out", "float32", ("D",)),),
        attrs=(_spec.Attr("n", "i64", default=4),),
        workspaces=(_spec.Tensor("partial", "float64", ("n", "D")),))
    assert _spec.check(op, [Shaped(8)], {"n": 3}).workspace_shapes == ((3, 8),)
    with pytest.raises(ValueError, match=r"scratchy: workspace 'partial' has a dimension n = -1 < 0"):
        _spec.check(op, [Shaped(8)], {"n": -1})


def test_an_attribute_sized_output_is_checked_by_name():
    # [N * k + E * (b - 1)]: attributes in an expression with shape symbols,
    # each refused by the output it would size.
    op = _spec.Op(
        package="t", name="routes", inputs=(_spec.Tensor("x", "float32", ("N", "E")),),
        outputs=(_spec.Tensor("w", "float32", ("N", "k")),
                 _spec.Tensor("flat", "int32", (_spec.Expr("N * k + E * (b - 1)", ("+", ("*", "N", "k"),
                                                                                   ("*", "E", ("-", "b", 1)))),))),
        attrs=(_spec.Attr("k", "i64"), _spec.Attr("b", "i64", default=1)))
    x = Shaped(3, 5)
    assert _spec.check(op, [x], {"k": 2, "b": 3}).output_shapes == ((3, 2), (3 * 2 + 5 * 2,))
    with pytest.raises(ValueError, match=r"routes: output 'w' has a dimension k = -1 < 0"):
        _spec.check(op, [x], {"k": -1})
    with pytest.raises(ValueError, match=r"routes: output 'flat' has a dimension N \* k \+ E \* \(b - 1\) = -2 < 0"):
        _spec.check(op, [x], {"k": 1, "b": 0})
    with pytest.raises(ValueError, match=r"routes: output 'flat' has a dimension N \* k \+ E \* \(b - 1\) that "
                                         r"overflows int64"):
        _spec.check(op, [x], {"k": 2, "b": 2**62})
    with pytest.raises(ValueError, match=r"routes: output 'w' \[N, k\] of shape \(3, 4611686018427387904\) and dtype "
                                         r"float32 would take \d+ bytes, more than 2\^63 - 1"):
        _spec.check(op, [x], {"k": 2**62})
    with pytest.raises(TypeError, match=r"routes: attribute 'k' is required"):
        _spec.check(op, [x], {})


def test_an_allocation_torch_refuses_is_named_by_op_and_buffer():
    # A broadcast query (its layout takes any row strides) of 2^22 sequences
    # by 2^16 heads asks for a 256 TiB output, more than a 47-bit address
    # space holds, so every allocator refuses it, overcommitting or not: the
    # error names the op and the output. (torch's C shim also logs its own
    # exception to stderr, which opgen cannot silence through the stable ABI.)
    s, h = 2**22, 2**16
    query = torch.zeros(1, 1, 256).expand(s, h, 256)
    cache = torch.zeros(1, 16, 1, 256)
    tables, lengths = torch.zeros(s, 1, dtype=torch.int32), torch.zeros(s, dtype=torch.int32)
    with pytest.raises(RuntimeError, match=r"^paged_attention_decode: output 'out' of shape \[4194304, 65536, 256\] "
                                           r"\(281474976710656 bytes\) could not be allocated on cpu"):
        tops.paged_attention_decode(query, cache, cache, tables, lengths, scale=0.1)


@pytest.mark.parametrize("dtype", [torch.int16, torch.uint16, torch.complex64])
def test_torch_names_a_dtype_opgen_does_not_take(dtype):
    a = torch.zeros(8, dtype=dtype)
    name = str(dtype).removeprefix("torch.")
    for fn in (torch.ops.opgen_ops.simple_add, tops.simple_add):
        with pytest.raises(RuntimeError, match=rf"simple_add: input 'a' has dtype {name}"):
            fn(a, a)
