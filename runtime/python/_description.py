"""An op's description: the dtypes, shapes, attributes and outputs as the spec
states them, which every Python entry point reads (opgen_ops._spec).

opgen's checked model is the one description of an op. Each op's module
(``<package>/_ops/<op>.py``) holds its facts as the model states them
(generator/rendering/template_data.cc, the facts every template reads) and
builds its ``Op`` with ``Op.from_facts``, which maps each fact to the field of
the same name: a fact this module does not know, or a field no fact fills, is
refused when the module is imported. Each class's ``FACTS`` names the
exceptions: a fact converted (an expression tree as tuples, a spec dtype as
numpy names it) or given to another field, and a fact the runtime does not
read (None), such as the names of the C++ bindings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import ClassVar

REQUIRED = object()  # the default of an attribute without one

# The Python type of each attribute type whose values check_attr returns as
# they are (an int that fits int64): a caller that holds such a value need not
# ask it (the torch wrappers, on every call: _torch_values.kernel_attrs).
PLAIN_TYPES = {"bool": bool, "i32": int, "i64": int, "f32": float, "f64": float, "enum": str}


class DTypes:
    """opgen's dtype table as the facts give it (template_data.cc's dtype_facts):
    each dtype's spec name (f32) as numpy and PyTorch name it (float32), and
    each of those names' code, its row in the table (the legacy descriptor's)."""

    def __init__(self, facts):
        self.python = {d["name"]: d["python"] for d in facts}
        self.codes = {d["python"]: d["code"] for d in facts}


def _plain(value):
    """A fact as the description holds it: a list as a tuple (the description is frozen)."""
    return tuple(_plain(v) for v in value) if isinstance(value, list) else value


def _only(record: Mapping, keys: frozenset, where: str, what: str) -> Mapping:
    """`record`, a record within a fact that a converter reads, refused where it has a key
    the converter does not know (that fact would be dropped)."""
    unknown = record.keys() - keys
    if unknown:
        raise TypeError(f"{where}: {what} has the fact(s) {', '.join(sorted(unknown))}, which the description "
                        f"does not know: opgen's facts and its runtime's description differ")
    return record


def _tree(node):
    """An expression tree of the facts ({kind, value | symbol | lhs, rhs}) as the
    description holds it: an int, a symbol's name, or (operator, lhs, rhs)."""
    if node is None:
        return None
    kind = node["kind"]
    if kind == "int":
        return node["value"]
    if kind == "symbol":
        return node["symbol"]
    return (kind, _tree(node["lhs"]), _tree(node["rhs"]))


_INIT_FIELDS: dict = {}


def _from_facts(cls, facts: Mapping, dtypes: DTypes, where: str, given: Mapping | None = None):
    """An instance of `cls` from its facts: each fact is the field of the same
    name (a list as a tuple), except those `cls.FACTS` names, which it converts
    (Converted) or leaves unread (None); `given` fills the fields no fact does
    (`cls.GIVEN`). A fact without a field, or a field without a fact, is
    refused, `where` (the op, the tensor or attribute) named: the facts of
    opgen's model and this runtime's classes must agree key for key."""
    names = _INIT_FIELDS.get(cls)
    if names is None:
        names = _INIT_FIELDS[cls] = frozenset(f.name for f in fields(cls) if f.init)
    special = cls.FACTS
    values = dict(given or {})
    for key, value in facts.items():
        if key in special:
            rule = special[key]
            if rule is not None:
                values.update(rule.convert(value, facts, dtypes, where))
        elif key in names:
            values[key] = _plain(value)
        else:
            raise TypeError(f"{where}: the fact '{key}' has no field in {cls.__name__} (nor does "
                            f"{cls.__name__}.FACTS convert it or leave it unread): opgen's facts and its "
                            f"runtime's description differ")
    missing = names - values.keys()
    if missing:
        raise TypeError(f"{where}: no fact fills {cls.__name__}'s field(s) {', '.join(sorted(missing))}: "
                        f"opgen's facts and its runtime's description differ")
    return cls(**values)


@dataclass(frozen=True)
class Converted:
    """A fact that fills fields of another name or form: `convert(value, facts,
    dtypes, where)` returns them, {field: value}; `fills` names them."""

    fills: tuple
    convert: Callable


def fact_keys(cls) -> frozenset:
    """The keys the facts of a `cls` have, no more, no fewer: those `cls.FACTS`
    names, and the name of every other field that neither a converted fact nor
    an argument of from_facts (`cls.GIVEN`) fills."""
    filled = {name for rule in cls.FACTS.values() if rule is not None for name in rule.fills}
    return frozenset(f.name for f in fields(cls) if f.init and f.name not in filled and f.name not in cls.GIVEN) \
        | cls.FACTS.keys()


@dataclass(frozen=True)
class Expr:
    """An output dimension computed from shape symbols: ``text`` as the spec
    writes it (``D/2``), ``tree`` as nested ``(operator, lhs, rhs)`` tuples
    over symbol names and ints."""

    text: str
    tree: object


_DIM_KEYS = frozenset({"text", "size", "symbol", "kind", "tree"})


def _shape(dims, where) -> tuple:
    """A shape's dimensions of the facts as the description holds them: a size, a symbol's name, or an Expr."""
    return tuple(d["size"] if d["kind"] == "fixed" else Expr(d["text"], _tree(d["tree"])) if d["kind"] == "expr"
                 else d["symbol"] for d in (_only(d, _DIM_KEYS, where, "a dimension") for d in dims))


def _trees(*names) -> dict:
    """Facts that are expression trees, each the field of its name."""
    return {name: Converted((name,), lambda v, facts, dtypes, where, name=name: {name: _tree(v)}) for name in names}


@dataclass(frozen=True)
class Constraint:
    """A rule between sizes and integer attributes (the spec's
    ``constraints``): ``lhs operator rhs``, or ``lhs in set``, with the
    expressions as Expr trees (also ``%``, and attribute names)."""

    text: str
    operator: str  # == != < <= > >= in
    lhs: object
    rhs: object = None
    set: tuple = ()  # 'in': the values

    FACTS: ClassVar[Mapping] = {
        **_trees("lhs", "rhs"),
        "names": None,  # the names it uses: opgen_render's, for the C++ bindings
    }
    GIVEN: ClassVar[frozenset] = frozenset()

    @classmethod
    def from_facts(cls, facts: Mapping, dtypes: DTypes, where: str) -> Constraint:
        return _from_facts(cls, facts, dtypes, f"{where} '{facts['text']}'")


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # a dtype as numpy and PyTorch name it (float32), or a type variable (T)
    shape: tuple = ()  # the dimensions after '...': ints, symbols, Exprs (an output updated in place: its input's)
    batch: bool = False  # the shape starts with '...'
    optional: bool = False  # inputs: may be None; outputs: made only when asked for (or with the optional input they update)
    on_request: bool = False  # outputs: made only when the caller asks for it (``return_<name>=True``), else left out
    layout: str = "contiguous"  # inputs: contiguous, rows (any row stride) or strided (the C++ bindings check it)
    # Integer inputs that index: the range of their values, as Expr trees over
    # symbols and integer attributes (unchecked: the values live on the device).
    values_min: object = None
    values_max: object = None
    values_min_exclusive: bool = False
    values_max_exclusive: bool = False
    values_range_text: str = ""  # "in [0, S)"
    # The values in the range are distinct (the spec's `unique`): unchecked too.
    values_unique: bool = False
    alias: str | None = None  # outputs: the input it updates in place
    unordered: bool = False  # outputs: the order of its elements is unspecified (tests compare a multiset)
    request_param: str | None = None  # outputs on request: the keyword that asks for it (opgen's names.h spells it)
    # Workspaces: the platforms that allocate it (opgen's facts name them all; a Tensor made by hand
    # may leave them empty: every platform of the op).
    platforms: tuple = ()
    doc: str = ""

    # template_data.cc's tensor_facts.
    FACTS: ClassVar[Mapping] = {
        "dims": Converted(("shape",), lambda v, facts, dtypes, where: {"shape": _shape(v, where)}),
        "dtype": Converted(("dtype",), lambda v, facts, dtypes, where: {
            "dtype": facts["type_var"] if v is None else dtypes.python[v]}),
        "type_var": None,  # in dtype
        **_trees("values_min", "values_max"),
        # The names of the C++ bindings' fields (names.h): the kernel interface's, not Python's.
        "strides_name": None,
        "in_range_name": None,
        "dims_name": None,
    }
    GIVEN: ClassVar[frozenset] = frozenset()

    @classmethod
    def from_facts(cls, facts: Mapping, dtypes: DTypes, where: str) -> Tensor:
        return _from_facts(cls, facts, dtypes, f"{where} '{facts['name']}'")

    @property
    def scalar(self) -> bool:
        """An input the spec declares ``[]``, which a call may give as ``[]``
        or ``[1]`` (as vLLM passes its scales): the body reads its one element."""
        return not self.shape and not self.batch


def _attr_default(value, facts, dtypes, where) -> dict:
    if not facts["has_default"]:
        return {"default": REQUIRED}
    return {"default": dtypes.python[value] if facts["type"] == "dtype" else _plain(value)}


def _attr_values(value, facts, dtypes, where) -> dict:
    """An enum's names; a dtype attribute's dtypes as numpy names them (float8_e4m3fn)."""
    return {"values": tuple(dtypes.python[v] for v in value) if facts["type"] == "dtype" else tuple(value)}


@dataclass(frozen=True)
class Attr:
    name: str
    type: str  # bool, i32, i64, f32, f64, enum, i32[], i64[], dtype
    default: object = REQUIRED
    min: float | int | None = None
    max: float | int | None = None
    min_exclusive: bool = False
    max_exclusive: bool = False
    range_text: str = ""  # as the spec's messages state it: ">= 0.0", "in (0.0, 1.0]"
    values: tuple = ()  # enum: the names, in index order; dtype: the dtypes allowed (float8_e4m3fn)
    size: int | None = None  # arrays: the fixed length, if any
    unique: bool = False  # arrays: no element twice
    doc: str = ""

    # template_data.cc's attr_facts.
    FACTS: ClassVar[Mapping] = {
        "default": Converted(("default",), _attr_default),
        "has_default": None,  # in default (REQUIRED where it has none)
        "values": Converted(("values",), _attr_values),
        "array": None,  # is_array reads it from the type
        "element_type": None,  # the C++ bindings' (an array's element)
        # The C++ names and texts of the kernel interface and the rules' messages.
        "enum_type": None,
        "enumerators": None,
        "min_text": None,
        "max_text": None,
    }
    GIVEN: ClassVar[frozenset] = frozenset()

    @classmethod
    def from_facts(cls, facts: Mapping, dtypes: DTypes, where: str) -> Attr:
        return _from_facts(cls, facts, dtypes, f"{where} '{facts['name']}'")

    @property
    def is_array(self) -> bool:
        return self.type.endswith("[]")


def _opaque_fields(value, facts, dtypes, where) -> dict:
    keys = frozenset({"name", "kind", "code", "type_var"})  # a dtype field's variable is its name's
    return {"fields": tuple((f["name"], f["kind"], f["code"])
                            for f in (_only(f, keys, where, "a descriptor field") for f in value))}


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

    # template_data.cc's opaque_facts (a dtype field's type variable is its name's).
    FACTS: ClassVar[Mapping] = {"fields": Converted(("fields",), _opaque_fields)}
    GIVEN: ClassVar[frozenset] = frozenset({"codes"})

    @classmethod
    def from_facts(cls, facts: Mapping, dtypes: DTypes, where: str) -> Opaque:
        return _from_facts(cls, facts, dtypes, f"{where}: the descriptor", {"codes": dtypes.codes})


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

    FACTS: ClassVar[Mapping] = {}
    GIVEN: ClassVar[frozenset] = frozenset()

    @classmethod
    def from_facts(cls, facts: Mapping, dtypes: DTypes, where: str) -> Backward:
        return _from_facts(cls, facts, dtypes, f"{where}: backward")


def _each(cls, name, role):
    """A fact that is a list of `cls`'s facts, the field of its name."""
    return Converted((name,), lambda v, facts, dtypes, where: {
        name: tuple(cls.from_facts(x, dtypes, f"{where}: {role}") for x in v)})


def _type_vars(value, facts, dtypes, where) -> dict:
    """Each type variable's dtypes; each derived one's (variable it follows, {its dtype: this one's}); each
    variable a dtype attribute binds, with the attribute; each an enum attribute chooses, with the attribute
    and {each of its values: a dtype or a variable}."""
    keys = frozenset({"name", "dtypes", "from", "map", "attr", "choices"})
    value = [_only(v, keys, where, "a type variable") for v in value]
    dtypes_of = {v["name"]: tuple(dtypes.python[d] for d in v["dtypes"]) for v in value}
    return {
        "type_vars": dtypes_of,
        "derived": {v["name"]: (v["from"], dict(zip(dtypes_of[v["from"]], (dtypes.python[d] for d in v["map"]))))
                    for v in value if v["from"]},
        "dtype_attrs": {v["name"]: v["attr"] for v in value if v["attr"] and not v["choices"]},
        "chosen": {v["name"]: (v["attr"], {value: dtypes.python[d] if d else var for value, d, var in v["choices"]})
                   for v in value if v["choices"]},
    }


def _handlers(value, facts, dtypes, where) -> dict:
    """platform -> the api_versions it has a handler for, in the spec's order of platforms (a
    handler's target is xla_targets', its symbol the C++ registration's)."""
    keys = frozenset({"platform", "api_version", "target", "symbol"})
    value = [_only(t, keys, where, "a handler") for t in value]
    return {"handlers": {p: tuple(t["api_version"] for t in value if t["platform"] == p) for p in facts["platforms"]}}


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
    # Every instantiation the kernels have, in the bindings' order: {variable: dtype}.
    instantiations: tuple = ()
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
    torch_lowered: bool = False  # the C++ kernels register a lowered schema, under torch_kernel_name
    torch_kernel_name: str = ""  # the name the C++ kernels register (opgen's names.h spells it)
    xla_targets: Mapping = field(default_factory=dict)  # api_version -> its custom call target (names.h's)
    opaque: Opaque | None = None
    doc: str = ""
    backward: Backward | None = None
    # False: the outputs are constants of the inputs (the spec's
    # `differentiable: false`); autograd and jax.grad pass no gradient through.
    differentiable: bool = True

    # template_data.cc's op_facts.
    FACTS: ClassVar[Mapping] = {
        "inputs": _each(Tensor, "inputs", "input"),
        "outputs": _each(Tensor, "outputs", "output"),
        "workspaces": _each(Tensor, "workspaces", "workspace"),
        "attrs": _each(Attr, "attrs", "attribute"),
        "constraints": _each(Constraint, "constraints", "constraint"),
        "type_vars": Converted(("type_vars", "derived", "dtype_attrs", "chosen"), _type_vars),
        "targets": Converted(("handlers",), _handlers),
        "xla_targets": Converted(("xla_targets",), lambda v, facts, dtypes, where: {"xla_targets": dict(v)}),
        "splits": Converted(("splits",), lambda v, facts, dtypes, where: {"splits": {
            s["name"]: tuple(s["symbols"]) for s in (_only(s, frozenset({"name", "symbols"}), where, "a split")
                                                     for s in v)}}),
        "opaque": Converted(("opaque",), lambda v, facts, dtypes, where: {
            "opaque": Opaque.from_facts(v, dtypes, where)}),
        "backward": Converted(("backward",), lambda v, facts, dtypes, where: {
            "backward": None if v is None else Backward.from_facts(v, dtypes, where)}),
        # The C++ bindings' and the build's: the shape symbols' binding order, the handlers'
        # symbols (in targets), XLA's command buffers, the state's C++ names, the spec's path.
        "symbols": None,
        "instantiations": Converted(("instantiations",), lambda v, facts, dtypes, where: {"instantiations": tuple(
            {t["name"]: dtypes.python[d] for t, d in zip(facts["type_vars"], row)} for row in v)}),
        "command_buffer_compatible": None,
        "state": None,
        "spec_path": None,
    }
    # The package's facts, and the torch schema as opgen_render spells it.
    GIVEN: ClassVar[frozenset] = frozenset({"package", "torch_namespace", "torch_schema"})

    @classmethod
    def from_facts(cls, facts: Mapping, dtypes, *, package: str, torch_namespace: str, torch_schema: str) -> Op:
        """The description from the op's facts (template_data.cc's op_facts) and
        opgen's dtype table (its dtype_facts), as each op's module builds it."""
        given = {"package": package, "torch_namespace": torch_namespace, "torch_schema": torch_schema}
        return _from_facts(cls, facts, DTypes(dtypes), f"{package}.{facts['name']}", given)

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
