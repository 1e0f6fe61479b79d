"""Attributes: Python values converted to the spec's types, as the C++ rules
take them (a wrong Python type is a TypeError here, before C++ sees it); what
a value is (an int, a symbolic size); attribute values as a cache key."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ._description import REQUIRED, Attr, Op
from ._errors import OpTypeError, OpValueError


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
