"""An op's description, as opgen writes it (``<package>/_ops/<op>.py``) from its
spec: the dtypes, shapes, attributes and outputs as the spec states them, which
every Python entry point reads (opgen_ops._spec)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

REQUIRED = object()  # the default of an attribute without one

# The Python type of each attribute type whose values check_attr returns as
# they are (an int that fits int64): a caller that holds such a value need not
# ask it (the torch wrappers, on every call: _torch_values.kernel_attrs).
PLAIN_TYPES = {"bool": bool, "i32": int, "i64": int, "f32": float, "f64": float, "enum": str}


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
    request_param: str = ""  # outputs on request: the keyword that asks for it (opgen's names.h spells it)
    platforms: tuple = ()  # workspaces: the platforms that allocate it (empty: every platform of the op)
    doc: str = ""

    @property
    def on_request(self) -> bool:
        """An output the caller asks for (``return_<name>=True``), else left out."""
        return self.optional and not self.alias

    @property
    def scalar(self) -> bool:
        """An input the spec declares ``[]``, which a call may give as ``[]``
        or ``[1]`` (as vLLM passes its scales): the body reads its one element."""
        return not self.shape and not self.batch


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
    # A variable an enum attribute chooses -> (the attribute, {each of its values: a dtype or a variable}).
    chosen: Mapping = field(default_factory=dict)
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
    torch_lowered: bool = False  # the C++ kernels register a lowered schema, under torch_kernel
    torch_kernel: str = ""  # the name the C++ kernels register (opgen's names.h spells it)
    xla_targets: Mapping = field(default_factory=dict)  # api_version -> its custom call target (names.h's)
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
        return self.xla_targets[4]

    def legacy_target(self, api_version: int) -> str:
        return self.xla_targets[api_version]
