"""An op's rules, and the one checker that every Python entry point runs.

opgen writes each op's description (``<package>/_ops/<op>.py``) from its spec:
the dtypes, shapes, attributes and outputs as the spec states them. Every
Python entry point -- the JAX wrapper, the PyTorch fake (meta) kernel, the
torch_xla kernel, the documented torch functions -- checks a call by handing
this module the description and the call's shapes, dtypes and attributes, so
they cannot disagree. The C++ handlers check the same rules again (their
messages name shapes as C++ does, ``[8, 3]``; these name them as Python does,
``(8, 3)``).

Framework-free (numpy only): a shape is a tuple of sizes (ints, or torch's
symbolic sizes under ``torch.compile``), a dtype is its numpy/torch name
(``"float32"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import eq, ge, gt, le, lt, ne

import numpy as np

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class OpTypeError(TypeError, RuntimeError):
    """A wrong kind of argument: a dtype, a Python type. A TypeError for JAX
    users, a RuntimeError as PyTorch's own kernels raise."""


class OpValueError(ValueError, RuntimeError):
    """A wrong value: a shape, a size, an attribute out of range."""


REQUIRED = object()  # the default of an attribute without one


@dataclass(frozen=True)
class Expr:
    """An output dimension computed from shape symbols: ``text`` as the spec
    writes it (``D/2``), ``tree`` as nested ``(operator, lhs, rhs)`` tuples
    over symbol names and ints."""

    text: str
    tree: object


@dataclass(frozen=True)
class Constraint:
    """A rule between sizes and integer attributes (the spec's
    ``constraints``): ``lhs operator rhs``, or ``lhs in values``, with the
    expressions as Expr trees (also ``%``, and attribute names)."""

    text: str
    operator: str  # == != < <= > >= in
    lhs: object
    rhs: object = None
    values: tuple = ()  # 'in'

    @property
    def names(self) -> list:
        out = []
        for tree in (self.lhs, self.rhs):
            _names(tree, out)
        return out


def _names(tree, out: list) -> None:
    if isinstance(tree, str):
        if tree not in out:
            out.append(tree)
    elif isinstance(tree, tuple):
        _names(tree[1], out)
        _names(tree[2], out)


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # a dtype as numpy and PyTorch name it (float32), or a type variable (T)
    shape: tuple = ()  # the dimensions after '...': ints, symbols, Exprs
    batch: bool = False  # the shape starts with '...'
    optional: bool = False  # inputs: may be None; outputs: made only when asked for (or with the optional input they update)
    layout: str = "contiguous"  # inputs: contiguous, rows (any row stride) or strided (the C++ bindings check it)
    # Integer inputs that index: the range of their values, as Expr trees over
    # symbols and integer attributes (unchecked: the values live on the device).
    values_min: object = None
    values_max: object = None
    values_min_exclusive: bool = False
    values_max_exclusive: bool = False
    values_range: str = ""  # "in [0, S)"
    # The values in the range are distinct (the spec's `unique`): unchecked too.
    values_unique: bool = False
    alias: str | None = None  # outputs: the input it updates in place
    platforms: tuple = ()  # workspaces: the platforms that allocate it (empty: every platform of the op)
    doc: str = ""

    @property
    def on_request(self) -> bool:
        """An output the caller asks for (``return_<name>=True``), else left out."""
        return self.optional and not self.alias

    @property
    def request_param(self) -> str:
        return "return_" + self.name

    @property
    def declared(self) -> str:
        """The shape as the spec writes it: ``[..., D/2]``."""
        dims = (["..."] if self.batch else []) + [d.text if isinstance(d, Expr) else str(d) for d in self.shape]
        return "[" + ", ".join(dims) + "]"


@dataclass(frozen=True)
class Attr:
    name: str
    type: str  # bool, i32, i64, f32, f64, enum, i32[], i64[], dtype
    default: object = REQUIRED
    min: float | int | None = None
    max: float | int | None = None
    min_exclusive: bool = False
    max_exclusive: bool = False
    range: str = ""  # as the spec's messages state it: ">= 0.0", "in (0.0, 1.0]"
    values: tuple = ()  # enum: the names, in index order; dtype: the dtypes allowed (float8_e4m3fn)
    size: int | None = None  # arrays: the fixed length, if any
    unique: bool = False  # arrays: no element twice
    doc: str = ""

    @property
    def is_array(self) -> bool:
        return self.type.endswith("[]")


@dataclass(frozen=True)
class Opaque:
    """The legacy descriptor's layout (opgen/opaque.h): the fixed fields in
    order as ``(name, kind, struct code)`` -- kind one of dtype, present,
    batch, symbol, attr, enum, array -- then the elements of each array
    attribute. A dtype field (``dtype_<V>``) carries its type variable's dtype
    as its index in opgen's dtype table, ``codes``."""

    fingerprint: int
    fields: tuple
    codes: Mapping = field(default_factory=dict)  # dtype name -> code
    layout_version: int = 1


@dataclass(frozen=True)
class Backward:
    """The spec's `backward:`: the op (of the same package) that computes the
    gradients. `inputs`: its inputs in order, each ("input" | "output" |
    "cotangent", a forward tensor's name); `gradients`: (its output, the
    forward input that output is the gradient of). The forward attributes the
    backward op declares are passed on; an output named by no "cotangent" is
    not differentiable."""
    op: str
    inputs: tuple
    gradients: tuple


@dataclass(frozen=True, eq=False)  # one description per op: compared and hashed by identity
class Op:
    package: str
    name: str
    inputs: tuple
    outputs: tuple
    attrs: tuple = ()
    workspaces: tuple = ()  # scratch buffers for the body: Tensors sized by symbols and integer attributes
    constraints: tuple = ()
    type_vars: Mapping = field(default_factory=dict)  # name -> the dtypes it ranges over
    # A derived variable -> (the variable it follows, {its dtype: this one's}).
    derived: Mapping = field(default_factory=dict)
    # A variable a dtype attribute binds -> the attribute.
    dtype_attrs: Mapping = field(default_factory=dict)
    api_versions: tuple = (4,)
    platforms: tuple = ("cuda", "cpu")
    # platform -> the api_versions it has a handler for (XLA:CPU runs 4 and 3 of
    # the spec's, opgen_render.context's _targets says; XLA:GPU all of them).
    handlers: Mapping = field(default_factory=dict)
    vmap_method: str = "sequential"
    batch_partitionable: bool = False
    splits: Mapping = field(default_factory=dict)  # split name -> the shape symbols devices may cut together
    torch_namespace: str = ""
    torch_schema: str = ""  # the spec's schema: "simple_add(Tensor a, ...) -> Tensor"
    torch_lowered: bool = False  # the C++ kernels register <name>__lowered
    opaque: Opaque | None = None
    doc: str = ""
    backward: Backward | None = None
    # False: the outputs are constants of the inputs (the spec's
    # `differentiable: false`); autograd and jax.grad pass no gradient through.
    differentiable: bool = True

    # Computed once, on first use (the description never changes): every
    # eager call reads some of them, and a property recomputed a call cost
    # the torch wrappers about 0.5 µs (bench/bench_torch_calls.py).
    @cached_property
    def required_inputs(self) -> tuple:
        return tuple(t for t in self.inputs if not t.optional)

    @cached_property
    def optional_inputs(self) -> tuple:
        return tuple(t for t in self.inputs if t.optional)

    @cached_property
    def aliased_outputs(self) -> tuple:
        return tuple(t for t in self.outputs if t.alias)

    @cached_property
    def requested_outputs(self) -> tuple:
        """The outputs made only when the caller asks for them, in spec (request-mask bit) order."""
        return tuple(t for t in self.outputs if t.on_request)

    def workspaces_on(self, platform: str) -> tuple:
        """The indices of the workspaces a call allocates on `platform` ("cpu", "cuda")."""
        return tuple(i for i, w in enumerate(self.workspaces) if not w.platforms or platform in w.platforms)

    @property
    def split_of(self) -> dict:
        """Each shape symbol of a split: the split's name."""
        return {symbol: name for name, symbols in self.splits.items() for symbol in symbols}

    @property
    def ffi_target(self) -> str:
        return f"{self.package}_{self.name}_ffi"

    def legacy_target(self, api_version: int) -> str:
        return f"{self.package}_{self.name}_legacy_v{api_version}"

    @property
    def torch_kernel(self) -> str:
        """The name the C++ kernels register: the op's, or <op>__lowered."""
        return self.name + ("__lowered" if self.torch_lowered else "")


def dtype_names(op: Op, t: Tensor) -> tuple:
    """The dtypes `t` may have."""
    return tuple(op.type_vars.get(t.dtype, (t.dtype,)))


def _require(condition, message: Callable[[], str]) -> None:
    if not condition:
        raise OpValueError(message())


def shape_text(shape) -> str:
    return str(tuple(int(d) if isinstance(d, int) else d for d in shape))


# --- The checked call --------------------------------------------------------------------------


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
        return _result_dtype(self.op, t, self.dtypes)

    def enum_index(self, name: str) -> int:
        attr = next(a for a in self.op.attrs if a.name == name)
        return attr.values.index(self.attrs[name])


def check(op: Op, inputs: Sequence, attrs: Mapping, *, hint: str = "jax",
          dtype_name: Callable = lambda x: x.dtype.name, require: Callable = _require,
          unchecked: Sequence = (), requested: Collection = ()) -> Call:
    """Checks a call against every rule of `op` and returns it bound.

    ``inputs`` holds, per input of the spec, an array (anything with
    ``.shape`` and ``.dtype``) or None (an absent optional input);
    ``dtype_name(x)`` is its dtype's numpy/torch name. ``attrs`` maps each
    attribute to its value, but for those named in ``unchecked``, which are
    left out (a fake kernel's enums and arrays, checked where they were
    lowered; output sizes and constraints name only integer attributes).
    ``hint`` names the framework whose conversion a dtype message suggests.
    ``require(condition, message)`` asserts a condition on sizes (PyTorch
    passes torch._check, for symbolic sizes). ``requested`` names the outputs
    on request (``optional: true``) that the caller asks for; the others are
    left out of the call (None).
    """
    if len(inputs) != len(op.inputs):
        raise OpTypeError(f"{op.name}: takes {len(op.inputs)} input(s), not {len(inputs)}")
    for t, x in zip(op.inputs, inputs):
        if x is None and not t.optional:
            raise OpTypeError(f"{op.name}: input '{t.name}' is required, not None")
    described = [None if x is None else (tuple(x.shape), dtype_name(x)) for x in inputs]
    checked = check_attrs(op, attrs, unchecked)
    dtypes = _bind_dtypes(op, described, hint, checked)
    symbols, batch = _bind_shapes(op, described, require)
    # Output and workspace dimensions name shape symbols and integer attributes.
    sizes = {**symbols, **{k: v for k, v in checked.items() if _is_int(v) or _is_symbolic(v)}}
    requested = frozenset(requested)
    on_request = {t.name for t in op.requested_outputs}
    if not requested <= on_request:
        raise OpTypeError(f"{op.name}: cannot ask for {', '.join(sorted(requested - on_request))}: the optional "
                          f"outputs are {', '.join(sorted(on_request)) or 'none'}")
    # An output that updates an optional input the call omits is left out
    # (None), and so is an output on request that the caller does not ask for.
    given = {t.name for t, x in zip(op.inputs, inputs) if x is not None}
    kept = [(not t.alias or t.alias in given) and (not t.on_request or t.name in requested) for t in op.outputs]
    out_dtypes = tuple(_result_dtype(op, t, dtypes) if k else None for t, k in zip(op.outputs, kept))
    shapes = tuple(_output_shape(op, t, d, sizes, batch, require) if k else None
                   for t, d, k in zip(op.outputs, out_dtypes, kept))
    _check_constraints(op, symbols, checked, require)
    workspace_dtypes = tuple(_result_dtype(op, t, dtypes) for t in op.workspaces)
    workspace_shapes = tuple(_output_shape(op, t, d, sizes, batch, require, "workspace")
                             for t, d in zip(op.workspaces, workspace_dtypes))
    return Call(op, tuple(inputs), dtypes, symbols, batch, checked, shapes, out_dtypes, workspace_shapes,
                workspace_dtypes, requested)


def requested_outputs(op: Op, requests: Mapping) -> frozenset:
    """The outputs on request a call asks for: ``requests`` maps each (by
    name) to its ``return_<name>`` keyword's value, which must be a bool."""
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


def _result_dtype(op: Op, t: Tensor, dtypes: Mapping) -> str:
    source = t
    if t.alias:
        source = next(i for i in op.inputs if i.name == t.alias)
    return dtypes[source.dtype] if source.dtype in op.type_vars else source.dtype


def _bind_dtypes(op: Op, inputs: Sequence, hint: str, attrs: Mapping) -> dict:
    # The variables no input binds first: a dtype attribute's value, and each
    # derived variable once the inputs have bound the one it follows.
    bound: dict = {v: attrs[a] for v, a in op.dtype_attrs.items() if a in attrs}
    by: dict = {v: f"attribute '{a}'" for v, a in op.dtype_attrs.items()}

    def convert(name: str) -> str:
        return f"x.astype(jnp.{name})" if hint == "jax" else f"x.to(torch.{name})"

    def derive() -> None:
        for v, (source, mapping) in op.derived.items():
            if source in bound and v not in bound:
                bound[v], by[v] = mapping[bound[source]], f"{source} = {bound[source]}"

    given_inputs = [(t, g) for t, g in zip(op.inputs, inputs) if g is not None]
    # Inputs of the variables that inputs bind, then those of the others.
    for t, given in sorted(given_inputs, key=lambda p: p[0].dtype in op.derived or p[0].dtype in op.dtype_attrs):
        derive()
        got = given[1]
        if t.dtype in op.type_vars and (t.dtype in op.derived or t.dtype in op.dtype_attrs):
            if t.dtype in bound and got != bound[t.dtype]:
                raise OpTypeError(f"{op.name}: input '{t.name}' has dtype {got}, but its dtype {t.dtype} is "
                                  f"{bound[t.dtype]} (from {by[t.dtype]}; convert it explicitly, e.g. "
                                  f"{convert(bound[t.dtype])})")
        elif t.dtype in op.type_vars:
            allowed = dtype_names(op, t)
            if t.dtype in bound:
                if got != bound[t.dtype]:
                    raise OpTypeError(f"{op.name}: input '{t.name}' has dtype {got}, but its dtype {t.dtype} is "
                                      f"{bound[t.dtype]} (bound by input '{by[t.dtype]}')")
            elif got not in allowed:
                raise OpTypeError(f"{op.name}: input '{t.name}' has dtype {got}; {t.dtype} must be one of "
                                  f"{', '.join(allowed)} (convert it explicitly, e.g. {convert(allowed[-1])})")
            else:
                bound[t.dtype], by[t.dtype] = got, t.name
        elif got != t.dtype:
            raise OpTypeError(f"{op.name}: input '{t.name}' has dtype {got}; the spec declares "
                              f"{t.dtype} (convert it explicitly, e.g. {convert(t.dtype)})")
    derive()
    return bound


def _bind_shapes(op: Op, inputs: Sequence, require: Callable) -> tuple:
    values: dict = {}
    origin: dict = {}
    batch_dims = None
    batch_source = None
    for t, given in zip(op.inputs, inputs):
        if given is None:
            continue
        shape = tuple(given[0])
        rank = len(t.shape)
        if len(shape) != rank and not (t.batch and len(shape) >= rank):
            raise OpValueError(f"{op.name}: input '{t.name}' has rank {len(shape)} (shape {shape_text(shape)}); "
                               f"the spec declares {t.declared}")
        lead = len(shape) - rank
        if t.batch:
            if batch_dims is None:
                batch_dims, batch_source = shape[:lead], t.name
            else:
                require(lead == len(batch_dims) and all(a == b for a, b in zip(shape[:lead], batch_dims)),
                        lambda: f"{op.name}: input '{t.name}' has shape {shape_text(shape)}; its leading "
                        f"dimensions {shape_text(shape[:lead])} (the spec's '...') must equal those of input "
                        f"'{batch_source}', {shape_text(batch_dims)}")
        for axis, dim in enumerate(t.shape):
            size = shape[lead + axis]
            at = lead + axis
            if isinstance(dim, int):
                require(size == dim, lambda: f"{op.name}: input '{t.name}' has shape {shape_text(shape)}; "
                        f"dimension {at} must be {dim}; the spec declares {t.declared}")
            elif dim in values:
                by, by_axis = origin[dim]
                require(size == values[dim], lambda: f"{op.name}: input '{t.name}' has shape "
                        f"{shape_text(shape)}; dimension {at} must be {dim} = {values[dim]} (bound by input "
                        f"'{by}' dimension {by_axis}); the spec declares {t.declared}")
            else:
                values[dim] = size
                origin[dim] = (t.name, at)
    return values, (batch_dims if batch_dims is not None else ())


# --- Output shapes: checked int64 arithmetic, as opgen/checked_dim.h ---------------------------


class _Inexact(Exception):
    def __init__(self, numerator, denominator):
        self.numerator, self.denominator = numerator, denominator


class _Overflow(Exception):
    pass


def _evaluate(tree, symbols: Mapping, require: Callable):
    if isinstance(tree, int):
        return tree
    if isinstance(tree, str):
        return symbols[tree]
    operator, lhs, rhs = tree
    a = _evaluate(lhs, symbols, require)
    b = _evaluate(rhs, symbols, require)
    if operator == "%":
        if _is_static(b) and b == 0:
            raise _Inexact(a, b)
        if not _is_static(a) or not _is_static(b):
            require(b != 0, lambda: f"{a} % {b} divides by zero")
            return a % b
        r = abs(a) % abs(b)  # C++'s remainder: the sign of a
        return -r if a < 0 else r
    if operator == "/":
        if _is_static(b) and b == 0:
            raise _Inexact(a, b)
        if _is_static(a) and _is_static(b):
            if a % b:
                raise _Inexact(a, b)
        else:
            require(b != 0 and a % b == 0, lambda: f"{a} is not divisible by {b}")
        r = a // b
    elif operator == "//":  # rounds down, as opgen::floor_div
        if _is_static(b) and b == 0:
            raise _Inexact(a, b)
        if not _is_static(b):
            require(b != 0, lambda: f"{a} // {b} divides by zero")
        r = a // b
    else:
        r = a + b if operator == "+" else a - b if operator == "-" else a * b
    if _is_static(r):
        if not INT64_MIN <= r <= INT64_MAX:
            raise _Overflow()
    else:
        require(r <= INT64_MAX, lambda: "overflows int64")
    return r


_COMPARE = {"==": eq, "!=": ne, "<": lt, "<=": le, ">": gt, ">=": ge}


def _check_constraints(op: Op, symbols: Mapping, attrs: Mapping, require: Callable) -> None:
    """Each constraint over the bound sizes and the checked attributes (one
    that names an attribute is left to the C++ bindings when the attributes
    are not given here: a fake kernel's)."""
    values = {**symbols, **{k: v for k, v in attrs.items() if _is_int(v) or _is_symbolic(v)}}
    for c in op.constraints:
        if any(n not in values for n in c.names):
            continue

        def message(c=c):
            return f"{op.name}: the spec requires {c.text}, but " + ", ".join(f"{n} = {values[n]}" for n in c.names)

        try:
            lhs = _evaluate(c.lhs, values, require)
            rhs = None if c.operator == "in" else _evaluate(c.rhs, values, require)
        except (_Inexact, _Overflow):
            raise OpValueError(message()) from None
        holds = lhs in c.values if c.operator == "in" else _COMPARE[c.operator](lhs, rhs)
        if _is_static(lhs) and (rhs is None or _is_static(rhs)):
            if not holds:
                raise OpValueError(message())
        else:
            require(holds, message)


def _is_static(v) -> bool:
    return isinstance(v, int)


def attrs_key(attrs: Mapping):
    """Attribute values as a dict key for a cache of checked calls, telling
    apart values Python calls equal but the checks do not (1, 1.0 and True;
    0.0 and -0.0; at any depth of a sequence); None where a value is not
    hashable."""
    def key(v):
        if isinstance(v, (list, tuple)):
            return type(v), tuple(key(e) for e in v)
        if isinstance(v, float):
            return float, v, math.copysign(1.0, v)
        return type(v), v

    try:
        out = tuple((k, key(v)) for k, v in attrs.items())
        hash(out)
    except TypeError:
        return None
    return out


def _itemsize(dtype: str) -> int:
    """Bytes per element of a dtype by its framework name: bool is one byte,
    every other dtype carries its width in bits in its name (float8_e4m3fn)."""
    digits = "".join(c for c in dtype.split("_")[0] if c.isdigit())
    return int(digits) // 8 if digits else 1


def _output_shape(op: Op, t: Tensor, dtype: str, symbols: Mapping, batch: tuple, require: Callable,
                  role: str = "output") -> tuple:
    if t.alias:
        source = next(i for i in op.inputs if i.name == t.alias)
        return _output_shape(op, Tensor(t.name, source.dtype, source.shape, source.batch), dtype, symbols, batch,
                             require)
    dims = []
    for d in t.shape:
        if isinstance(d, Expr):
            try:
                v = _evaluate(d.tree, symbols, require)
            except _Inexact as e:
                raise OpValueError(f"{op.name}: {role} '{t.name}' is declared {t.declared}, but {e.numerator} is "
                                   f"not divisible by {e.denominator}") from None
            except _Overflow:
                raise OpValueError(f"{op.name}: {role} '{t.name}' has a dimension {d.text} that overflows "
                                   "int64") from None
            require(v >= 0, lambda: f"{op.name}: {role} '{t.name}' has a dimension {d.text} = {v} < 0")
            dims.append(v)
        elif isinstance(d, int):
            dims.append(d)
        else:
            v = symbols[d]  # a shape symbol, or an integer attribute, which may be negative
            require(v >= 0, lambda: f"{op.name}: {role} '{t.name}' has a dimension {d} = {v} < 0")
            dims.append(v)
    shape = (tuple(batch) if t.batch else ()) + tuple(dims)
    # XLA sizes a buffer in bytes as an int64 (and aborts the process past
    # it); so does torch's allocator.
    size = math.prod(shape) * _itemsize(dtype)
    message = lambda: (f"{op.name}: {role} '{t.name}' {t.declared} of shape {shape} and dtype {dtype} "  # noqa: E731
                       f"would take {size} bytes, more than 2^63 - 1")
    if all(_is_static(v) for v in shape):
        if size > INT64_MAX:
            raise OpValueError(message())
    else:
        require(size <= INT64_MAX, message)
    return shape


# --- Attributes --------------------------------------------------------------------------------

_INT_RANGES = {"i32": (-(2**31), 2**31 - 1), "i64": (INT64_MIN, INT64_MAX)}
_F32_MAX = 3.4028234663852886e38


def check_attrs(op: Op, attrs: Mapping, unchecked: Sequence = ()) -> dict:
    """Each attribute's value checked (type, range, size, enum values); the
    defaults fill in the ones not given. Those named in `unchecked` are left out."""
    unknown = set(attrs) - {a.name for a in op.attrs}
    if unknown:
        raise OpTypeError(f"{op.name}: no attribute named {', '.join(sorted(unknown))}")
    out = {}
    for a in op.attrs:
        if a.name in unchecked:
            continue
        if a.name in attrs:
            value = attrs[a.name]
        elif a.default is not REQUIRED:
            value = a.default
        else:
            raise OpTypeError(f"{op.name}: attribute '{a.name}' is required")
        out[a.name] = check_attr(op.name, a, value)
    return out


def check_attr(op: str, a: Attr, value):
    who = f"{op}: attribute '{a.name}'"
    if a.type == "dtype":
        name = dtype_of(value)
        if name is None:
            raise OpTypeError(f"{who} must be a dtype, one of {', '.join(a.values)}; not {type(value).__name__}")
        if name not in a.values:
            raise OpValueError(f"{who} is {name}; it must be one of {', '.join(a.values)}")
        return name
    if a.type == "enum":
        if not isinstance(value, str):
            raise OpTypeError(f"{who} must be a str, one of {', '.join(a.values)}; not {type(value).__name__}")
        if value not in a.values:
            raise OpValueError(f"{who} is {value!r}; it must be one of {', '.join(a.values)}")
        return value
    if a.is_array:
        return _check_array(who, a, value)
    return _check_scalar(who, a, a.type, value)


def dtype_of(value) -> str | None:
    """A dtype attribute's value by its numpy/torch name (float8_e5m2), from
    that name, a torch.dtype, or anything numpy takes for a dtype (a numpy
    dtype, jnp.float8_e5m2); None for anything else."""
    if isinstance(value, str):
        return value
    if type(value).__module__ == "torch":  # torch.float8_e5m2, without importing torch here
        return str(value).removeprefix("torch.")
    try:
        return np.dtype(value).name
    except TypeError:
        return None


def _is_bool(v) -> bool:
    return isinstance(v, (bool, np.bool_))


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not _is_bool(v)


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not _is_bool(v)


def _is_symbolic(v) -> bool:
    """A size or scalar that torch.compile traces symbolically: the C++
    kernel checks its value when the graph runs."""
    return type(v).__name__ in ("SymInt", "SymFloat", "SymBool")


def _check_scalar(who: str, a: Attr, kind: str, value):
    if _is_symbolic(value):
        return value
    if kind == "bool":
        if not _is_bool(value):
            raise OpTypeError(f"{who} must be a bool, not {type(value).__name__}")
        return bool(value)
    if kind in _INT_RANGES:
        if not _is_int(value):
            raise OpTypeError(f"{who} must be an int, not {type(value).__name__}")
        value = int(value)
        low, high = _INT_RANGES[kind]
        if not low <= value <= high:
            raise OpValueError(f"{who} = {value} does not fit {kind}")
    else:
        if not _is_real(value):
            raise OpTypeError(f"{who} must be a float, not {type(value).__name__}")
        value = float(value)
        if not math.isfinite(value):
            raise OpValueError(f"{who} = {value} is not finite")
        if kind == "f32" and abs(value) > _F32_MAX:
            raise OpValueError(f"{who} = {value} does not fit f32")
    _check_range(who, a, value)
    return value


def _check_range(who: str, a: Attr, value) -> None:
    below = a.min is not None and not (value > a.min if a.min_exclusive else value >= a.min)
    above = a.max is not None and not (value < a.max if a.max_exclusive else value <= a.max)
    if below or above:
        raise OpValueError(f"{who} = {value} must be {a.range}")


def _check_array(who: str, a: Attr, value) -> tuple:
    if isinstance(value, (str, bytes)) or not (isinstance(value, Sequence) or hasattr(value, "__array__")):
        raise OpTypeError(f"{who} must be a sequence of ints, not {type(value).__name__}")
    if getattr(value, "ndim", 1) != 1:
        raise OpTypeError(f"{who} must be one-dimensional, not of shape {value.shape}")
    element = a.type[:-2]
    out = []
    for i, v in enumerate(value):
        if not _is_int(v):
            raise OpTypeError(f"{who} element {i} must be an int, not {type(v).__name__}")
        out.append(int(v))
    if a.size is not None and len(out) != a.size:
        raise OpValueError(f"{who} has {len(out)} elements; the spec fixes its size at {a.size}")
    low, high = _INT_RANGES[element]
    for i, v in enumerate(out):
        if not low <= v <= high:
            raise OpValueError(f"{who} element {i} = {v} does not fit {element}")
        _check_range(f"{who} element {i}", a, v)
    if a.unique:
        for i, v in enumerate(out):
            if v in out[:i]:
                raise OpValueError(f"{who} lists {v} twice (element {out.index(v)} and element {i}); its "
                                   "elements must differ")
    return tuple(out)
