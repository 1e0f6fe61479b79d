"""Symbolic sizes: under torch.compile's symbolic sizes (SymInt), the shapes of a
call come from the description's expressions, evaluated here (``evaluate``,
Python's one evaluator of them), and the C++ rules check the sizes' hints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._attrs import _is_int, _is_symbolic
from ._description import Expr, Op, Tensor


def _hint(v):
    """A symbolic size's value in the example torch.compile traces with
    (None where it has none: an unbacked size); a plain value as it is."""
    return getattr(getattr(v, "node", None), "hint", None) if _is_symbolic(v) else v


def _declared_dtype(op: Op, t: Tensor, dtypes: Mapping) -> str:
    """The dtype of output or workspace `t` from the type variables' dtypes:
    for a call whose unbacked sizes keep the C++ rules from naming them."""
    source = next(i for i in op.inputs if i.name == t.alias) if t.alias else t
    return dtypes.get(source.dtype, source.dtype)


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
    dims = tuple(evaluate(d.tree, sizes) if isinstance(d, Expr) else d if isinstance(d, int) else sizes[d]
                 for d in t.shape)
    return (tuple(batch) if t.batch else ()) + dims


def evaluate(tree, sizes: Mapping):
    """An Expr tree's value, as opgen/checked_dim.h computes it: `/` divides
    exactly (the rules have checked it), `//` rounds down, `%` takes the sign
    of its left operand. The runtime's one evaluator, for the sizes only Python
    knows (torch.compile's symbolic ones); the tests draw calls with it too."""
    if isinstance(tree, int):
        return tree
    if isinstance(tree, str):
        return sizes[tree]
    operator, lhs, rhs = tree
    a, b = evaluate(lhs, sizes), evaluate(rhs, sizes)
    if operator in ("/", "//"):
        return a // b
    if operator == "%":
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    return a + b if operator == "+" else a - b if operator == "-" else a * b
