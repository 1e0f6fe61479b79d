"""An op's description, and the one check that every Python entry point runs.

opgen writes each op's description (``<package>/_ops/<op>.py``) from its spec:
the dtypes, shapes, attributes and outputs as the spec states them. Every
Python entry point -- the JAX wrapper, the PyTorch fake (meta) kernel, the
torch_xla kernel, the torchax lowering -- checks a call with ``check``, which
asks the op's C++ rules (``<op>_rules.h``, through the package's
``_C.check``: opgen/shape_source.h) with the call's shapes, dtypes and
attributes alone. Those are the rules every C++ entry point (the typed FFI,
the legacy shims, the PyTorch kernels) runs on the buffers, so a rule and its
message are written once, and a refusal reads the same wherever it comes
from (shapes as ``[8, 3]``; dtypes spelled as numpy and PyTorch name them).

What stays here is Python's own: converting Python values to the spec's
types (a str where an int belongs is a TypeError here, before C++ sees it),
the arity of a call and the names of the outputs asked for, and the
dtypes and output shapes the bindings build from a checked call. Under
``torch.compile``'s symbolic sizes (SymInt), the C++ rules check the sizes'
hints (the example values traced with; an unbacked size has none and is
checked when the kernel runs, as every call is), and the output shapes come
out symbolic from the description's expressions (``_symbolic_shapes``).

Framework-free (numpy only): a shape is a tuple of sizes, a dtype is its
numpy/torch name (``"float32"``).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property

import numpy as np

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
    unordered: bool = False  # outputs: the order of its elements is unspecified (tests compare a multiset)
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
    def scalar(self) -> bool:
        """An input the spec declares ``[]``, which a call may give as ``[]``
        or ``[1]`` (as vLLM passes its scales): the body reads its one element."""
        return not self.shape and not self.batch

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
    def plain_attrs(self) -> tuple:
        """(name, the plain Python type check_attr takes as it is, or None) of each attribute."""
        return tuple((a.name, PLAIN_TYPES.get(a.type)) for a in self.attrs)

    @cached_property
    def requested_outputs(self) -> tuple:
        """The outputs made only when the caller asks for them, in spec (request-mask bit) order."""
        return tuple(t for t in self.outputs if t.on_request)

    @cached_property
    def saved_on_request(self) -> frozenset:
        """The outputs on request that the backward takes (docs/spec.md, "Outputs on request"): a
        call that is differentiated asks for them itself, so that the backward gets them rather
        than recomputing them, and hands the caller only those it asked for."""
        if self.backward is None or not self.differentiable:
            return frozenset()
        on_request = {t.name for t in self.requested_outputs}
        return frozenset(name for kind, name in self.backward.inputs if kind == "output" and name in on_request)

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

    The op's C++ rules check it (the package's ``_C.check``); under
    torch.compile's symbolic sizes, they check the sizes' hints, and the
    output shapes come out symbolic from the description's expressions.
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
        symbols, batch, shapes = _rules_check(op, described, values, mask, hint)
    else:
        hints = [None if x is None else (x[0], tuple(_hint(d) for d in x[1])) for x in described]
        hinted = [_hint(v) for v in values]
        if all(d is not None for x in hints if x is not None for d in x[1]) and None not in hinted:
            _rules_check(op, hints, hinted, mask, hint)
        symbols, batch, shapes = _symbolic_shapes(op, described, checked, requested)
    dtypes = _bind_dtypes(op, described, checked)
    out_shapes = tuple(shapes.get(t.name) for t in op.outputs)
    out_dtypes = tuple(None if shape is None else _result_dtype(op, t, dtypes)
                       for t, shape in zip(op.outputs, out_shapes))
    # Every platform's workspaces, as the rules size them (their checks have
    # passed for the platform _rules_check names; another platform's kernel
    # refuses a size only it allocates).
    sizes = {**symbols, **{k: v for k, v in checked.items() if _is_int(v) or _is_symbolic(v)}}
    workspace_shapes = tuple(_shape(op, t, sizes, batch) for t in op.workspaces)
    workspace_dtypes = tuple(_result_dtype(op, t, dtypes) for t in op.workspaces)
    return Call(op, tuple(inputs), dtypes, symbols, batch, checked, out_shapes, out_dtypes, workspace_shapes,
                workspace_dtypes, requested)


@cache
def _compiled():
    """The package's extension module, whose `check` runs each op's C++ rules."""
    return importlib.import_module("._C", __package__)


def _rules_check(op: Op, described: Sequence, values: Sequence, mask: int, hint: str) -> tuple:
    """(symbols, batch, output shapes by name) from the op's C++ rules, which
    size the workspaces of the CPU where the op runs there (else of its one
    platform): a workspace of CUDA alone may be too large for a CPU call to
    have, which the CUDA kernel refuses when it is one."""
    platform = "cpu" if "cpu" in op.platforms else op.platforms[0]
    try:
        return _compiled().check(op.name, described, values, mask, hint, platform)
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


def _hint(v):
    """A symbolic size's value in the example torch.compile traces with
    (None where it has none: an unbacked size); a plain value as it is."""
    return getattr(getattr(v, "node", None), "hint", None) if _is_symbolic(v) else v


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


def _bind_dtypes(op: Op, inputs: Sequence, attrs: Mapping) -> dict:
    """Each type variable's dtype in a call the rules accepted: as its first
    given input has it, a dtype attribute's value, a derived variable's from
    the one it follows."""
    bound = {v: attrs[a] for v, a in op.dtype_attrs.items() if a in attrs}
    for t, x in zip(op.inputs, inputs):
        if x is not None and t.dtype in op.type_vars and t.dtype not in op.derived:
            bound.setdefault(t.dtype, x[0])
    for v, (source, mapping) in op.derived.items():
        if source in bound:
            bound[v] = mapping[bound[source]]
    return bound


# --- Symbolic sizes: the shapes, from the description's expressions ----------------------------


def _symbolic_shapes(op: Op, inputs: Sequence, attrs: Mapping, requested: frozenset) -> tuple:
    """(symbols, batch, output shapes by name) of a call whose sizes are
    symbolic: each symbol as its first input binds it, and each dimension
    computed as the C++ rules compute it (they have checked the call's hints;
    the kernel checks every call that runs)."""
    sizes: dict = {}
    batch = None
    for t, x in zip(op.inputs, inputs):
        if x is None:
            continue
        shape = x[1]
        lead = len(shape) - len(t.shape)
        if t.batch and batch is None:
            batch = tuple(shape[:lead])
        for axis, d in enumerate(t.shape):
            if isinstance(d, str):
                sizes.setdefault(d, shape[lead + axis])
    batch = batch if batch is not None else ()
    symbols = dict(sizes)
    sizes.update({k: v for k, v in attrs.items() if _is_int(v) or _is_symbolic(v)})
    given = {t.name: x[1] for t, x in zip(op.inputs, inputs) if x is not None}
    # An output updated in place has its input's shape (a scalar's [1] included).
    shapes = {t.name: tuple(given[t.alias]) if t.alias else _shape(op, t, sizes, batch) for t in op.outputs
              if (not t.alias or t.alias in given) and (not t.on_request or t.name in requested)}
    return symbols, batch, shapes


def _shape(op: Op, t: Tensor, sizes: Mapping, batch: tuple) -> tuple:
    """The shape of output or workspace `t` for sizes the rules have checked."""
    if t.alias:
        t = next(i for i in op.inputs if i.name == t.alias)
    dims = tuple(_evaluate(d.tree, sizes) if isinstance(d, Expr) else d if isinstance(d, int) else sizes[d]
                 for d in t.shape)
    return (tuple(batch) if t.batch else ()) + dims


def _evaluate(tree, sizes: Mapping):
    """An Expr tree's value, as opgen/checked_dim.h computes it: `/` divides
    exactly (the rules have checked it), `//` rounds down, `%` takes the sign
    of its left operand."""
    if isinstance(tree, int):
        return tree
    if isinstance(tree, str):
        return sizes[tree]
    operator, lhs, rhs = tree
    a, b = _evaluate(lhs, sizes), _evaluate(rhs, sizes)
    if operator in ("/", "//"):
        return a // b
    if operator == "%":
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    return a + b if operator == "+" else a - b if operator == "-" else a * b


def attrs_key(attrs: Mapping):
    """Attribute values as a dict key for a cache of checked calls, telling
    apart values Python calls equal but the checks do not (1, 1.0 and True;
    0.0 and -0.0; at any depth of a sequence); None where a value is not
    hashable."""
    def key(v):
        if isinstance(v, (list, tuple)):
            return type(v), tuple(key(e) for e in v)
        if isinstance(v, float):  # numpy's float64 too (a float subclass): its type tells it apart
            return type(v), v, math.copysign(1.0, v)
        return type(v), v

    try:
        out = tuple((k, key(v)) for k, v in attrs.items())
        hash(out)
    except TypeError:
        return None
    return out


# --- Attributes: Python values as the rules take them ------------------------------------------


def check_attrs(op: Op, attrs: Mapping, unchecked: Sequence = ()) -> dict:
    """Each attribute's value converted to its spec type (the C++ rules check
    its range, size and enum value); the defaults fill in the ones not
    given. Those named in `unchecked` are left out."""
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


# The Python type of each attribute type whose values check_attr returns as
# they are (an int that fits int64): a caller that holds such a value need not
# ask it (the torch wrappers, on every call: _torch_values.kernel_attrs).
PLAIN_TYPES = {"bool": bool, "i32": int, "i64": int, "f32": float, "f64": float, "enum": str}
INT64_LIMIT = 2**63


def check_attr(op: str, a: Attr, value):
    """A Python value as attribute `a`'s type: a bool, an int (that fits
    int64: the rules take nothing wider), a float, an enum's or a dtype's
    name, a tuple of ints; a wrong Python type is a TypeError here."""
    who = f"{op}: attribute '{a.name}'"
    if a.type == "dtype":
        name = dtype_of(value)
        if name is None:
            raise OpTypeError(f"{who} must be a dtype, one of {', '.join(a.values)}; not {type(value).__name__}")
        return name
    if a.type == "enum":
        if not isinstance(value, str):
            raise OpTypeError(f"{who} must be a str, one of {', '.join(a.values)}; not {type(value).__name__}")
        return value
    if a.is_array:
        return _check_array(who, a, value)
    if _is_symbolic(value):
        return value
    if a.type == "bool":
        if not _is_bool(value):
            raise OpTypeError(f"{who} must be a bool, not {type(value).__name__}")
        return bool(value)
    if a.type in ("i32", "i64"):
        if not _is_int(value):
            raise OpTypeError(f"{who} must be an int, not {type(value).__name__}")
        return _int64(f"{who} = {int(value)}", a.type, int(value))
    if not _is_real(value):
        raise OpTypeError(f"{who} must be a float, not {type(value).__name__}")
    return float(value)


def _int64(what: str, kind: str, value: int) -> int:
    if not -INT64_LIMIT <= value < INT64_LIMIT:
        raise OpValueError(f"{what} does not fit {kind}")
    return value


def dtype_of(value) -> str | None:
    """A dtype attribute's value by its numpy/torch name (float8_e5m2), from
    that name, a torch.dtype, or anything numpy takes for a dtype (a numpy
    dtype, jnp.float8_e5m2); None for anything else, None itself included
    (which numpy takes for float64). (A Python number, which numpy refuses
    too, is refused before numpy is asked: torch.compile cannot trace
    numpy's refusal.)"""
    if value is None or isinstance(value, (int, float, complex)):
        return None
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


def _check_array(who: str, a: Attr, value) -> tuple:
    if isinstance(value, (str, bytes)) or not (isinstance(value, Sequence) or hasattr(value, "__array__")):
        raise OpTypeError(f"{who} must be a sequence of ints, not {type(value).__name__}")
    if getattr(value, "ndim", 1) != 1:
        raise OpTypeError(f"{who} must be one-dimensional, not of shape {value.shape}")
    if not isinstance(value, (Sequence, np.ndarray)) and len(value):
        # A tensor's elements are tensors; named without iterating it, which runs an op (a fake mode
        # refuses one on a real tensor).
        raise OpTypeError(f"{who} element 0 must be an int, not {type(value).__name__}")
    element = a.type[:-2]
    out = []
    for i, v in enumerate(value):
        if not _is_int(v):
            raise OpTypeError(f"{who} element {i} must be an int, not {type(v).__name__}")
        out.append(_int64(f"{who} element {i} = {int(v)}", element, int(v)))
    return tuple(out)
