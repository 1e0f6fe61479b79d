"""How an op's values cross between its spec and its torch kernels: attributes
lowered to what a C++ kernel takes (an enum as its index, an array as a CPU
tensor) and lifted back, the arguments torch hands a kernel, outputs in the
spec's order (an output updated in place is its input), dtypes by name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from . import _C
from ._spec import INT64_LIMIT, Op, OpTypeError, OpValueError, check_attr, require_inputs


def lift(op: Op, attrs: Mapping) -> dict:
    """The spec's attribute values from what the lowered kernel takes (an enum
    as its index, an array as a 1-D CPU tensor)."""
    out = dict(attrs)
    for a in op.attrs:
        if a.name not in attrs:
            continue
        v = attrs[a.name]
        if a.type == "enum":
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(a.values):
                raise OpValueError(f"{op.name}: attribute '{a.name}' has index {v}; it has {len(a.values)} values "
                                   f"({', '.join(a.values)})")
            out[a.name] = a.values[v]
        elif a.is_array:
            want = torch.int32 if a.type == "i32[]" else torch.int64
            if not isinstance(v, torch.Tensor) or v.dim() != 1 or v.dtype != want or v.device.type != "cpu":
                raise OpValueError(f"{op.name}: attribute '{a.name}' must arrive as a contiguous 1-D CPU tensor of "
                                   f"{str(want).removeprefix('torch.')} (call the op with a list of ints)")
            out[a.name] = v.tolist()
    return out


@torch.compiler.assume_constant_result
def _rules_text(message: str, *args: str) -> str:
    """A refusal's text as the runtime's C++ writes it (``_C.<message>``).
    Under torch.compile, Dynamo calls this with its constant arguments rather
    than tracing into it: it cannot trace an extension module's function."""
    return getattr(_C, message)(*args)


def lower(op: Op, attrs: Mapping) -> dict:
    """What the lowered kernel takes for checked attribute values."""
    out = {}
    for a in op.attrs:
        v = attrs[a.name]
        if a.type == "enum":
            if v not in a.values:  # it has no index to lower to: the rules' refusal, here
                raise OpValueError(_rules_text("enum_unknown", op.name, a.name, v, ", ".join(a.values)))
            out[a.name] = a.values.index(v)
        elif a.is_array:
            out[a.name] = torch.tensor(v, dtype=torch.int32 if a.type == "i32[]" else torch.int64)
        elif a.type == "dtype":  # the schema's ScalarType
            out[a.name] = _scalar_type(op, a, v)
        else:
            out[a.name] = v
    return out


def _scalar_type(op: Op, a, name: str) -> torch.dtype:
    """A dtype attribute's value as the schema's ScalarType; one outside its
    values (which the schema may not even have) is the rules' refusal, here."""
    if name not in a.values:
        raise OpValueError(_rules_text("dtype_attr_refused", op.name, a.name, name, ", ".join(a.values)))
    return torch_dtype(name)


def kernel_attrs(op: Op, attrs: Mapping) -> Mapping:
    """A wrapper's attribute values (`attrs` holds every attribute of `op`) as
    the kernels take them, each checked with JAX's rule and message
    (``_spec.check_attr``): torch's schema parser would take a value of
    another Python type and convert it (topk=torch.tensor(2.7) as 2, True as
    1, an array for an int, 1 for a bool, a tensor for a float), and no
    kernel would see what was passed. A value of the plain Python type its
    spec type takes (PLAIN_TYPES: a bool, an int that fits int64, a float, an
    enum's str) passes as it is, at the cost of a type test on every call;
    any other is converted (a numpy scalar, an int for a float, a sequence for
    an array) or refused, and a dtype attribute becomes the schema's
    ScalarType, a torch.dtype, from any spelling the checks read
    ("float8_e5m2", a numpy dtype), one not among its values refused by name."""
    for name, plain in op.plain_attrs:
        value = attrs[name]
        if type(value) is not plain or (plain is int and not -INT64_LIMIT <= value < INT64_LIMIT):
            break
    else:
        return attrs
    out = dict(attrs)
    for a in op.attrs:
        value = check_attr(op.name, a, out[a.name])
        out[a.name] = _scalar_type(op, a, value) if a.type == "dtype" else value
    return out


def require_tensors(op: Op, inputs: Sequence) -> None:
    """A call's inputs as every route takes them, checked in one order: one
    per input of the spec and none None that the spec requires
    (`_spec.require_inputs`), then each given one a torch.Tensor."""
    require_inputs(op, inputs)
    for t, x in zip(op.inputs, inputs):
        if x is not None and not isinstance(x, torch.Tensor):
            raise OpTypeError(f"{op.name}: input '{t.name}' must be a torch.Tensor, not {type(x).__name__}")


def kernel_arguments(op: Op, args: Sequence, kwargs: Mapping) -> tuple:
    """A registered kernel's arguments (what ``torch.ops.<ns>.<op>`` hands
    the fake, XLA, lowering and torchax kernels) as (inputs, attributes, the
    names of the outputs on request it asks for): torch leaves out trailing
    optional inputs that are None, and may pass inputs by name."""
    inputs = list(args) + [None] * (len(op.inputs) - len(args))
    attrs = dict(kwargs)
    for i, t in enumerate(op.inputs):
        if t.name in attrs:
            inputs[i] = attrs.pop(t.name)
    attrs, requested = split_requests(op, attrs)
    return inputs, attrs, requested


def split_requests(op: Op, kwargs: Mapping) -> tuple:
    """A kernel's keyword arguments as (attributes, the names of the outputs
    on request it asks for): each output on request has a flag in the
    schema, ``return_<name>``."""
    attrs = dict(kwargs)
    requested = frozenset(t.name for t in op.requested_outputs if attrs.pop(t.request_param, False))
    return attrs, requested


def request_flags(op: Op, requested) -> dict:
    """The schema's flags (``return_<name>``) for the outputs in `requested`."""
    return {t.request_param: t.name in requested for t in op.requested_outputs}


def unasked(op: Op, requested) -> list:
    """For each output of `op`: whether it is on request and not asked for."""
    return [o.on_request and o.name not in requested for o in op.outputs]


def placeholders(op: Op, checked, values: Sequence, empty) -> list:
    """`values` (the outputs in spec order, None where not made) with a tensor
    of no elements, ``empty(dtype)``, for each output on request that the call
    does not ask for: the schema returns a Tensor for every output (a custom
    op returns no Tensor?), and the documented function turns it into None."""
    return [empty(torch_dtype(checked.output_dtype(o))) if skip else v
            for o, v, skip in zip(op.outputs, values, unasked(op, checked.requested))]


def schema_result(op: Op, values: Sequence):
    """The schema's return value: the outputs that alias no input."""
    fresh = [v for o, v in zip(op.outputs, values) if not o.alias]
    return None if not fresh else fresh[0] if len(fresh) == 1 else tuple(fresh)


def spec_order(op: Op) -> tuple:
    """For each output of `op`: the index of the input it updates in place, or -1."""
    names = [t.name for t in op.inputs]
    return tuple(names.index(o.alias) if o.alias else -1 for o in op.outputs)


def fresh(result) -> list:
    """The outputs in a schema's result: those that alias no input."""
    return [] if result is None else list(result) if isinstance(result, tuple) else [result]


def in_spec_order(order: tuple, inputs: Sequence, fresh: list) -> list:
    """An op's outputs in spec order (`spec_order`), from the outputs that
    alias no input: an output updated in place is its input."""
    fresh = list(reversed(fresh))
    return [inputs[k] if k >= 0 else fresh.pop() for k in order]


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a dtype as the descriptions name it (float8_e4m3fn):
    opgen's dtype table (runtime/include/opgen/dtype_table.h) gives each dtype
    one name in numpy, jax.numpy and torch."""
    return getattr(torch, name)
