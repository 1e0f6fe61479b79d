"""Checking a call: ``check`` asks the op's C++ rules (the package's
``_C.check``) with the call's shapes, dtypes and attributes alone, and
returns the bound call (``Call``) that the bindings build from their answer."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from ._attrs import _is_int, _is_symbolic, check_attrs
from ._description import REQUIRED, Attr, Op, Tensor
from ._errors import OpTypeError, OpValueError
from ._symbolic import _declared_dtype, _hint, _shape, _symbolic_shapes


@dataclass
class Call:
    """A call that passed every rule: what the bindings need to build it."""

    op: Op
    inputs: tuple  # as given, None for an absent optional input
    dtypes: dict  # type variable -> framework dtype name
    symbols: dict  # shape symbol -> size
    batch: tuple  # the leading dimensions ('...')
    attrs: dict  # attribute -> checked value (enum: its name; array: a tuple of ints)
    output_shapes: tuple  # None for an output left out with the optional input it updates
    output_dtypes: tuple  # framework dtype names
    workspace_shapes: tuple = ()  # a legacy call passes each workspace as one more result
    workspace_dtypes: tuple = ()
    requested: frozenset = frozenset()  # the outputs on request that the caller asks for
    # Each output's dtype by name, made or not (an output on request not asked
    # for too), as the rules bound it; not those left out with their optional input.
    dtype_by_output: Mapping = field(default_factory=dict)

    @property
    def requested_mask(self) -> int:
        """Bit i: the caller asks for the i-th output on request."""
        return sum(1 << i for i, t in enumerate(self.op.requested_outputs) if t.name in self.requested)

    @property
    def present(self) -> int:
        """Bit i: the i-th optional input is given."""
        mask = 0
        for i, t in enumerate(self.op.optional_inputs):
            if self.inputs[self.op.inputs.index(t)] is not None:
                mask |= 1 << i
        return mask

    @property
    def operands(self) -> list:
        """The custom call's operands: the required inputs, then the given optional ones."""
        return [self.inputs[self.op.inputs.index(t)] for t in self.operand_inputs]

    @property
    def operand_inputs(self) -> list:
        """The inputs of the spec the operands are, in their order."""
        given = [t for t, x in zip(self.op.inputs, self.inputs) if x is not None]
        return [t for t in given if not t.optional] + [t for t in given if t.optional]

    def with_operands(self, operands: Sequence) -> Call:
        """This call on other operands of the same inputs (one device's shards)."""
        inputs = [None] * len(self.inputs)
        for t, x in zip(self.operand_inputs, operands):
            inputs[self.op.inputs.index(t)] = x
        return check(self.op, inputs, self.attrs, requested=self.requested)

    def output_dtype(self, t: Tensor) -> str:
        """The dtype output `t` has in this call (made or not)."""
        return self.dtype_by_output[t.name]

    def enum_index(self, name: str) -> int:
        attr = next(a for a in self.op.attrs if a.name == name)
        return attr.values.index(self.attrs[name])


def require_inputs(op: Op, inputs: Sequence) -> None:
    """One input (or None) per input of the spec, and no None for a required one."""
    if len(inputs) != len(op.inputs):
        raise OpTypeError(f"{op.name}: takes {len(op.inputs)} input(s), not {len(inputs)}")
    for t, x in zip(op.inputs, inputs):
        if x is None and not t.optional:
            raise OpTypeError(f"{op.name}: input '{t.name}' is required, not None")


def check(op: Op, inputs: Sequence, attrs: Mapping, *, hint: str = "jax",
          dtype_name: Callable = lambda x: x.dtype.name, unchecked: Sequence = (),
          requested: Collection = (), strides: Callable | None = None) -> Call:
    """Checks a call against every rule of `op` and returns it bound.

    ``inputs`` holds, per input of the spec, an array (anything with
    ``.shape`` and ``.dtype``) or None (an absent optional input);
    ``dtype_name(x)`` is its dtype's numpy/torch name. ``attrs`` maps each
    attribute to its value; those named in ``unchecked`` (a fake kernel's
    lowered enums and arrays, checked where they were lowered) are handed to
    the rules as the enum's index and the array's default. ``hint`` names the
    framework ("jax", "torch") whose spelling a dtype message suggests.
    ``requested`` names the outputs on request (``optional: true``) that the
    caller asks for; the others are left out of the call (None).
    ``strides(x)``, where given, is an input's strides (a torch tensor's, fake
    or not), which the rules hold to its spec layout as they do in a kernel's
    call; without it every input is dense (a JAX array).

    The op's C++ rules check it (the package's ``_C.check``) and answer
    its dtypes and shapes; under torch.compile's symbolic sizes, they check
    the sizes' hints (the dtype rules alone where a size has none), and the
    shapes come out symbolic from the description's expressions.
    """
    require_inputs(op, inputs)
    def describe(x) -> tuple:
        st = () if strides is None else tuple(strides(x))
        # (Symbolic strides, which torch.compile's dynamic shapes give, are left to the kernel's call.)
        given = st and all(type(d) is int for d in st)
        return (dtype_name(x), tuple(x.shape), st) if given else (dtype_name(x), tuple(x.shape))

    described = [None if x is None else describe(x) for x in inputs]
    checked = check_attrs(op, attrs, unchecked)
    requested = frozenset(requested)
    on_request = [t.name for t in op.requested_outputs]
    if not requested <= set(on_request):
        raise OpTypeError(f"{op.name}: cannot ask for {', '.join(sorted(requested - set(on_request)))}: the "
                          f"optional outputs are {', '.join(sorted(on_request)) or 'none'}")
    mask = sum(1 << i for i, name in enumerate(on_request) if name in requested)
    values = [checked[a.name] if a.name in checked else _placeholder(a, attrs.get(a.name)) for a in op.attrs]
    # (A plain int is the common case, and the cheap test: every trace pays it.)
    symbolic = (any(type(d) is not int and _is_symbolic(d) for x in described if x is not None for d in x[1])
                or any(_is_symbolic(v) for v in values))
    if not symbolic:
        symbols, batch, dtypes, outputs, workspaces = _rules_check(op, described, values, mask, hint)
        shapes = {name: shape for name, (shape, _) in outputs.items() if shape is not None}
        workspace_shapes = tuple(shape for shape, _ in workspaces)
    else:
        hints = [None if x is None else (x[0], tuple(_hint(d) for d in x[1])) for x in described]
        hinted = [_hint(v) for v in values]
        if all(d is not None for x in hints if x is not None for d in x[1]) and None not in hinted:
            _, _, dtypes, outputs, workspaces = _rules_check(op, hints, hinted, mask, hint)
        else:
            # An unbacked size has no hint: the dtype rules alone run (they read
            # no size), and the dtypes follow from the type variables they bind.
            dtypes = _rules_check(op, hints, [0 if v is None else v for v in hinted], mask, hint, sizes=False)[2]
            outputs = {t.name: (None, _declared_dtype(op, t, dtypes)) for t in op.outputs}
            workspaces = [(None, _declared_dtype(op, t, dtypes)) for t in op.workspaces]
        symbols, batch, shapes = _symbolic_shapes(op, described, checked, requested)
        sizes = {**symbols, **{k: v for k, v in checked.items() if _is_int(v) or _is_symbolic(v)}}
        workspace_shapes = tuple(_shape(op, t, sizes, batch) for t in op.workspaces)
    out_shapes = tuple(shapes.get(t.name) for t in op.outputs)
    out_dtypes = tuple(None if shape is None else outputs[t.name][1] for t, shape in zip(op.outputs, out_shapes))
    return Call(op, tuple(inputs), dtypes, symbols, batch, checked, out_shapes, out_dtypes, workspace_shapes,
                tuple(dtype for _, dtype in workspaces), requested,
                {name: dtype for name, (_, dtype) in outputs.items()})


@cache
def _compiled():
    """The package's extension module, whose `check` runs each op's C++ rules."""
    return importlib.import_module("._C", __package__)


def _rules_check(op: Op, described: Sequence, values: Sequence, mask: int, hint: str, sizes: bool = True) -> tuple:
    """(symbols, batch, type variables' dtypes, outputs {name: (shape or
    None, dtype)}, workspaces ((shape, dtype), ...)) from the op's C++ rules
    (``_C.check``), which check the workspaces of the CPU where the op runs
    there (else of its one platform) and size every platform's: a workspace
    of CUDA alone may be too large for a CPU call to have, which the CUDA
    kernel refuses when it is one. With `sizes` false, the dtype rules alone,
    which answer the type variables alone."""
    platform = "cpu" if "cpu" in op.platforms else op.platforms[0]
    try:
        return _compiled().check(op.name, described, values, mask, hint, platform, sizes)
    except TypeError as e:
        raise OpTypeError(str(e)) from None
    except ValueError as e:
        raise OpValueError(str(e)) from None


def _placeholder(a: Attr, value):
    """What the rules get of an attribute a fake kernel cannot read (a lowered
    enum arrives as its index; an array as a tensor, whose values a fake
    tensor does not have): the index, and the default or no elements; no
    output's shape depends on either."""
    if a.type == "enum":
        return int(value) if _is_int(value) else 0
    return tuple(a.default) if a.default is not REQUIRED else ()


def asked_for(op: Op, requests: Mapping) -> frozenset:
    """The names of the outputs on request a call asks for (`Op.requested_outputs`
    are the tensors it may ask for): ``requests`` maps each (by name) to its
    ``return_<name>`` keyword's value, which must be a bool."""
    for name, value in requests.items():
        if not isinstance(value, (bool, np.bool_)):
            raise OpTypeError(f"{op.name}: return_{name} must be a bool, not {type(value).__name__}")
    return frozenset(name for name, value in requests.items() if value)


class _Shaped:
    """A shape and a dtype name: what check() reads of an array."""

    def __init__(self, shape, dtype: str):
        self.shape, self.dtype = tuple(shape), dtype


def splits_evenly(op: Op, shapes: Sequence, dtypes: Sequence, attrs: Mapping, split: str, shards: int) -> bool:
    """Whether cutting the dimensions of `split` into `shards` equal parts gives
    each device a valid call of `op`: every input (a shape and dtype name per
    input of the spec; None where absent) has those dimensions in multiples
    of `shards`, and the parts keep the op's rules (a rotary part holds whole
    heads). Where not, a framework keeps them whole on every device."""
    symbols = set(op.splits[split])
    parts = []
    for t, shape, dtype in zip(op.inputs, shapes, dtypes):
        if shape is None:
            parts.append(None)
            continue
        lead = len(shape) - len(t.shape)
        own = list(shape[lead:])
        for k, d in enumerate(t.shape):
            if isinstance(d, str) and d in symbols:
                if own[k] % shards:
                    return False
                own[k] //= shards
        parts.append(_Shaped(tuple(shape[:lead]) + tuple(own), dtype))
    try:
        check(op, parts, attrs, dtype_name=lambda x: x.dtype)
    except (OpTypeError, OpValueError):
        return False
    return True
