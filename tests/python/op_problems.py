"""Random valid calls of an op, drawn from its description alone
(``opgen_ops._ops.<op>.OP``): sizes for its shape symbols that satisfy its
constraints and output expressions, leading dimensions where a shape has
'...', attribute values, and input values -- of an index input, inside the
value range its spec declares (distinct ones where it is `unique`).
test_every_op.py runs every op of the package on them, so that an op added
to specs/ is tested without a line written for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from opgen_ops import _spec

_INTEGERS = ("int32", "int64", "uint8", "int8")


def choice(op, var: str, dtypes: dict) -> str:
    """The first value of the enum attribute that chooses `var` whose choice is
    dtypes[var], given the other variables' dtypes."""
    _, mapping = op.chosen[var]
    return next(value for value, d in mapping.items() if dtypes.get(d, d) == dtypes[var])


def instantiations(op) -> list[dict]:
    """Every dtype combination of the op's type variables ({} when it has none),
    as the model lists them (the kernels' instantiations)."""
    return [dict(d) for d in op.instantiations]


def instantiation_id(dtypes: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in dtypes.items()) or "fixed"


@dataclass
class Problem:
    op: object
    dtypes: dict  # type variable -> dtype name
    inputs: list  # numpy arrays; None for an optional input left out
    attrs: dict  # every attribute without a default, and random values for some with one; the
    # return_<name> flag of each output on request (every wrapper takes them as keywords)
    call: object  # the _spec.Call the description makes of it (output shapes and dtypes)


def _check(op, inputs, attrs):
    """The call `attrs` (attributes and the flags of the outputs on request) makes."""
    flags = {t.request_param: t.name for t in op.requested_outputs}
    requested = {flags[k] for k, v in attrs.items() if k in flags and v}
    return _spec.check(op, inputs, {k: v for k, v in attrs.items() if k not in flags}, requested=requested)


def numpy_dtype(name: str):
    return np.dtype(getattr(ml_dtypes, name, name))


def dtype_of(op, t, dtypes: dict) -> str:
    return dtypes.get(t.dtype, t.dtype)


def wrong_dtype(op, t) -> str:
    """A dtype input `t` does not take."""
    allowed = op.type_vars.get(t.dtype, (t.dtype,))
    return next(d for d in ("float32", "int32", "float16", "uint8", "complex64") if d not in allowed)


# An expression's value over sizes and attributes: the runtime's own evaluator.
_evaluate = _spec.evaluate


def _symbols(op) -> list:
    out = []
    for t in op.inputs:
        for d in t.shape:
            if isinstance(d, str) and d not in out:
                out.append(d)
    return out


def _attr_value(a, rng):
    """A value of attribute `a`: its default, or (without one, or at random) one drawn from its type and range."""
    if a.default is not _spec.REQUIRED and rng.random() < 0.5:
        return a.default
    if a.type in ("enum", "dtype"):
        return a.values[rng.integers(len(a.values))]
    if a.type == "bool":
        return bool(rng.integers(2))
    if a.is_array:
        return a.default if a.default is not _spec.REQUIRED else []
    low = a.min if a.min is not None else (-4 if a.max is None else a.max - 8)
    high = a.max if a.max is not None else low + 8
    if a.type in ("i32", "i64"):
        low, high = int(low) + (1 if a.min_exclusive else 0), int(high) - (1 if a.max_exclusive else 0)
        return int(rng.integers(low, min(high, low + 8) + 1))
    return float(rng.uniform(low, high)) if high > low else float(low) + 1.0


def _distinct(t, shape, dtype: str, low: int, high: int, rng):
    """Values of a `unique` input: distinct ones drawn from [low, high] (a
    sample without replacement), and where the input has more entries than
    that holds, the rest a value just outside the declared range (low - 1,
    or high + 1 where low - 1 does not fit the dtype), which every body skips
    with <input>_in_range; shuffled."""
    count = int(np.prod(shape, dtype=np.int64))
    held = max(high - low + 1, 0)
    inside = low + rng.choice(held, size=min(count, held), replace=False) if held else np.zeros(0, np.int64)
    rest = count - inside.size
    if rest:
        limits = np.iinfo(dtype)
        if t.values_min is not None and low - 1 >= limits.min:
            outside = low - 1
        elif t.values_max is not None and high + 1 <= limits.max:
            outside = high + 1
        else:
            raise AssertionError(f"{t.name}: {count} distinct values do not fit {t.values_range_text} in {dtype}, "
                                 "and no value of the dtype lies outside it")
        inside = np.concatenate([inside, np.full(rest, outside, np.int64)])
    rng.shuffle(inside)
    return inside.reshape(shape).astype(dtype)


def _values(t, shape, dtype: str, bounds: dict, rng):
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype in _INTEGERS:
        low, high = (0, 255) if dtype == "uint8" else (-5, 9)
        if t.values_min is not None:
            low = _evaluate(t.values_min, bounds) + (1 if t.values_min_exclusive else 0)
        if t.values_max is not None:
            high = _evaluate(t.values_max, bounds) - (1 if t.values_max_exclusive else 0)
        if t.values_unique:
            return _distinct(t, shape, dtype, low, high, rng)
        return rng.integers(low, high + 1, shape).astype(dtype)
    return rng.standard_normal(shape).astype(numpy_dtype(dtype))


def draw(op, dtypes: dict, rng, *, with_optional: bool = True, asked: bool = True, batch: tuple | None = None,
         multiples: dict | None = None, scalars_as_one: bool = False, tries: int = 2000) -> Problem:
    """A valid call of `op` with `dtypes`; sizes from 1 to 8 (or one of the
    values a constraint `S in [...]` allows), each symbol named in `multiples`
    that many times over; leading dimensions of 1 to 3 (or `batch`); asking
    for every output on request, or (`asked` False) for none; each scalar
    input (the spec's `[]`) of shape [] or (`scalars_as_one`) [1], as vLLM
    passes its scales."""
    symbols = _symbols(op)
    chosen = {c.lhs: c.set for c in op.constraints if c.operator == "in" and isinstance(c.lhs, str)}
    times = multiples or {}
    for _ in range(tries):
        sizes = {s: (int(rng.choice(chosen[s])) if s in chosen else int(rng.integers(1, 9))) * times.get(s, 1)
                 for s in symbols}
        attrs = {a.name: _attr_value(a, rng) for a in op.attrs}
        attrs.update({a: dtypes[v] for v, a in op.dtype_attrs.items()})  # the instantiation's choice
        attrs.update({op.chosen[v][0]: choice(op, v, dtypes) for v in op.chosen})
        bounds_attrs = dict(attrs)
        attrs.update({t.request_param: asked for t in op.requested_outputs})
        lead = batch if batch is not None else tuple(int(rng.integers(1, 4)) for _ in range(int(rng.integers(0, 3))))
        bounds = {**sizes, **{k: v for k, v in bounds_attrs.items() if isinstance(v, int) and not isinstance(v, bool)}}
        inputs = []
        for t in op.inputs:
            if t.optional and not with_optional:
                inputs.append(None)
                continue
            shape = (lead if t.batch else ()) + tuple(d if isinstance(d, int) else sizes[d] for d in t.shape)
            if t.scalar and scalars_as_one:
                shape = (1,)
            inputs.append(_values(t, shape, dtype_of(op, t, dtypes), bounds, rng))
        try:
            call = _check(op, inputs, attrs)
        except (_spec.OpValueError, ValueError):
            continue  # a constraint or an output expression does not hold: draw again
        return Problem(op, dtypes, inputs, attrs, call)
    raise AssertionError(f"{op.name}: no valid call in {tries} draws of sizes from 1 to 8")


def redraw(p: Problem, rng) -> Problem:
    """Another call of the same sizes and attributes, with fresh input values."""
    bounds = {**p.call.symbols, **{k: v for k, v in p.attrs.items() if isinstance(v, int) and not isinstance(v, bool)}}
    inputs = [None if x is None else _values(t, x.shape, x.dtype.name, bounds, rng) for t, x in zip(p.op.inputs, p.inputs)]
    return Problem(p.op, p.dtypes, inputs, p.attrs, _check(p.op, inputs, p.attrs))
