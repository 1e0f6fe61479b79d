"""The differential test of every route of every op: one call, drawn from the
op's description alone (``opgen_ops._ops.<op>.OP``), through every entry
point the op has, and every pair of answers must agree -- the same values to
the dtype's tolerance, the same gradients, or the same refusal (the kind of
exception and opgen's text) -- but where a difference is intended, which
INTENDED states, once, with its reason.

Why: opgen's promise is that one spec makes every entry point behave alike,
and each defect of issue 37 was two routes disagreeing on a call nobody had
written a test for (a 0-d tensor for an int attribute, a float64 array
without jax_enable_x64, an attribute past a constraint, torchax under
autograd). So the calls are drawn, not written: valid ones (op_problems.py),
and ones at and just past every edge the description gives -- each attribute
at its bounds and past them, of each wrong Python kind; each input of a
wrong dtype, rank or size, empty, None, a view, past its value range; and
calls under differentiation.

The pieces, each once: ``Case`` (a call, reproducible from its seed, op and
index), ``Outcome`` (what a route gave: values and gradients, or a refusal),
``ROUTES`` (name -> the function that runs a call that way), ``differ`` (the
strict comparison), ``INTENDED`` (the differences that are meant) and
``run`` (calls x routes -> a report). tests/python/test_routes.py runs a
bounded sample in CI; tests/torchax/test_routes_torchax.py the torchax
routes (in their own process: importing torchax changes torch's state);
``python routes.py --seed S --calls N`` the long run (``--help``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import subprocess
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import jax
import numpy as np
import torch
from torch.overrides import TorchFunctionMode

import op_problems
import op_references as ref
import opgen_ops.jax as jops
import opgen_ops.torch as tops
from opgen_ops import _ops, _spec
from torch_arrays import to_torch

# --- Cases: calls drawn from the description ------------------------------------------------------


@dataclass
class Case:
    """One call of `op`, made from (seed, op, index) alone (``case``)."""

    op: _spec.Op
    seed: int
    index: int
    edge: str  # what the call tries: "valid", "attribute 'topk': 0-d tensor 2.7", ...
    dtypes: dict  # the instantiation drawn: type variable -> dtype name
    inputs: list  # numpy arrays; None for an input not given
    attrs: dict  # every keyword of the wrappers (attributes, return_<name> flags): any Python value
    views: dict = field(default_factory=dict)  # input index -> "rows" | "strided": a view of a wider tensor
    grad: bool = False  # differentiated: the torch inputs require grad, and the gradient routes run

    def describe(self) -> str:
        """One line that says what the call is and how to run it again."""
        given = []
        for t, x in zip(self.op.inputs, self.inputs):
            if x is None:
                given.append(f"{t.name}=None")
            else:
                view = f" ({self.views[self.op.inputs.index(t)]} view)" if self.op.inputs.index(t) in self.views else ""
                given.append(f"{t.name}={x.dtype.name}{list(x.shape)}{view}")
        attrs = ", ".join(f"{k}={_show(v)}" for k, v in self.attrs.items())
        return (f"{self.op.name}({', '.join(given)}; {attrs}){' under differentiation' if self.grad else ''}"
                f" -- {self.edge} -- replay: python tests/python/routes.py --seed {self.seed} --ops {self.op.name}"
                f" --index {self.index}")


def _show(v) -> str:
    """A value as the reproducer line shows it: its Python type where repr hides it."""
    if isinstance(v, torch.Tensor):
        return f"torch.tensor({v.tolist()!r}, dtype={v.dtype})"
    if isinstance(v, np.ndarray):
        return f"np.array({v.tolist()!r}, dtype={v.dtype})"
    if isinstance(v, np.generic):
        return f"np.{type(v).__name__}({v.item()!r})"
    return repr(v)


def _crc(name: str) -> int:
    return zlib.crc32(name.encode())


# The wrong Python kinds every attribute is tried with (each with a value the attribute would take
# were it of the right kind, `v`), by the attribute's type. The numpy scalars of the right kind are
# among them: the checks take np.integer for an int, np.floating for a float, np.bool_ for a bool.
def _int_kinds(v: int) -> dict:
    return {"bool True": True, "float with a fraction": v + 0.7, "integral float": float(v),
            "0-d float tensor": torch.tensor(v + 0.7), "0-d int tensor": torch.tensor(v),
            "1-element tensor": torch.tensor([v]), "0-d array": np.array(v), "1-element array": np.array([v]),
            "numpy int64": np.int64(v), "numpy float64": np.float64(v), "numpy bool": np.bool_(True),
            "None": None, "str": str(v)}


def _bool_kinds(v: bool) -> dict:
    return {"int 1": 1, "int 0": 0, "float 1.0": 1.0, "0-d tensor": torch.tensor(v),
            "1-element tensor": torch.tensor([v]), "0-d array": np.array(v), "1-element array": np.array([v]),
            "numpy bool": np.bool_(v), "numpy int64": np.int64(1), "None": None, "str": str(v)}


def _float_kinds(v: float) -> dict:
    return {"bool True": True, "int 1": 1, "0-d tensor": torch.tensor(v), "1-element tensor": torch.tensor([v]),
            "0-d array": np.array(v), "1-element array": np.array([v]), "numpy float32": np.float32(v),
            "numpy float64": np.float64(v), "None": None, "str": str(v)}


def _enum_kinds(v: str) -> dict:
    return {"a name it does not have": "no_such_value", "int 0": 0, "bool True": True, "numpy str": np.str_(v),
            "bytes": v.encode(), "0-d tensor": torch.tensor(0), "None": None}


def _dtype_kinds(a: _spec.Attr, v: str) -> dict:
    outside = next(d for d in ("float32", "float64", "int32", "bfloat16") if d not in a.values)
    return {"a dtype outside its values": outside, "a name of no dtype": "float9",
            "numpy dtype": op_problems.numpy_dtype(v), "torch dtype": getattr(torch, v),
            "jax.numpy type": getattr(jax.numpy, v), "int 0": 0, "bool True": True, "None": None}


def _array_kinds(a: _spec.Attr, v: tuple) -> dict:
    first = v[0] if v else (int(a.min) if a.min is not None else 0)
    some = list(v) or [first]
    return {"tuple": tuple(v), "numpy array": np.array(v, np.int64), "torch tensor": torch.tensor(v, dtype=torch.int64),
            "an int": first, "bool elements": [True] * len(some), "float elements": [float(e) for e in some],
            "numpy int elements": [np.int64(e) for e in some], "0-d tensor elements": [torch.tensor(e) for e in some],
            "2-d array": np.array([some]), "None": None, "str": str(first)}


def _int_bounds(a: _spec.Attr, call: _spec.Call, rng) -> dict:
    """An int attribute at and past its bounds and the sizes of the call (a
    constraint such as `topk <= E` ties it to one), far past them (an output
    that large could not be allocated: the constraint must refuse it first),
    and past what its type holds."""
    out = {}
    if a.min is not None:
        low = int(a.min) + (1 if a.min_exclusive else 0)
        out |= {"its min": low, "its min - 1": low - 1}
    if a.max is not None:
        high = int(a.max) - (1 if a.max_exclusive else 0)
        out |= {"its max": high, "its max + 1": high + 1}
    symbols = sorted(call.symbols.items())
    if symbols:
        _, size = symbols[rng.integers(len(symbols))]
        out |= {"a size of the call": size, "a size of the call + 1": size + 1}
    out |= {"2**40": 2**40, "2**63 (past int64)": 2**63, "-2**63 - 1 (past int64)": -(2**63) - 1}
    if a.type == "i32":
        out |= {"2**31 (past int32)": 2**31}
    return out


def _float_bounds(a: _spec.Attr) -> dict:
    """A float attribute at its bounds and a step either side (in float64: a
    step inside the bound may round onto it in float32), and the values no
    bound admits."""
    out = {}
    for name, bound in (("min", a.min), ("max", a.max)):
        if bound is not None:
            out |= {f"its {name}": float(bound), f"just below its {name}": math.nextafter(float(bound), -math.inf),
                    f"just above its {name}": math.nextafter(float(bound), math.inf)}
    return out | {"inf": math.inf, "-inf": -math.inf, "nan": math.nan, "1e39 (past float32)": 1e39,
                  "1e-46 (below float32's least)": 1e-46}


def _array_bounds(a: _spec.Attr, v: tuple) -> dict:
    out = {"empty": [], "an element twice": list(v[:1]) * 2 if v else [0, 0]}
    if a.min is not None:
        out["an element below its min"] = [int(a.min) - 1]
    if a.max is not None:
        out["an element above its max"] = [int(a.max) + 1]
    if a.size is not None:
        out["one element more than its size"] = list(v) + list(v[:1])
    out["an element past int64"] = [2**63]
    return out


_INT_KIND_NAMES = tuple(_int_kinds(1))
_BOOL_KIND_NAMES = tuple(_bool_kinds(True))
_FLOAT_KIND_NAMES = tuple(_float_kinds(1.0))
_ENUM_KIND_NAMES = tuple(_enum_kinds("x"))
_ARRAY_KIND_NAMES = tuple(_array_kinds(_spec.Attr("a", "i64[]"), (1,)))
_INT_BOUND_NAMES = ("its min", "its min - 1", "its max", "its max + 1", "a size of the call", "a size of the call + 1",
                    "2**40", "2**63 (past int64)", "-2**63 - 1 (past int64)", "2**31 (past int32)")


def _attr_edges(a: _spec.Attr) -> list:
    """The names of the values attribute `a` is tried with (materialised by `_attr_value`)."""
    if a.type in ("i32", "i64"):
        bounds = [n for n in _INT_BOUND_NAMES if not (("min" in n and a.min is None) or ("max" in n and a.max is None)
                                                     or ("int32" in n and a.type != "i32"))]
        return bounds + list(_INT_KIND_NAMES)
    if a.type == "bool":
        return list(_BOOL_KIND_NAMES)
    if a.type in ("f32", "f64"):
        return list(_float_bounds(a)) + list(_FLOAT_KIND_NAMES)
    if a.type == "enum":
        return list(_ENUM_KIND_NAMES)
    if a.type == "dtype":
        return list(_dtype_kinds(a, a.values[0]))
    return list(_array_bounds(a, (0,))) + list(_ARRAY_KIND_NAMES)


def _attr_value(a: _spec.Attr, edge: str, v, call: _spec.Call, rng):
    if a.type in ("i32", "i64"):
        values = _int_bounds(a, call, rng) | _int_kinds(v)
    elif a.type == "bool":
        values = _bool_kinds(v)
    elif a.type in ("f32", "f64"):
        values = _float_bounds(a) | _float_kinds(v)
    elif a.type == "enum":
        values = _enum_kinds(v)
    elif a.type == "dtype":
        values = _dtype_kinds(a, v)
    else:
        values = _array_bounds(a, tuple(v)) | _array_kinds(a, tuple(v))
    return values[edge]


_FLOATS = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")


def _input_edges(op: _spec.Op, t: _spec.Tensor) -> list:
    """What each input is tried with (materialised by `_input_value`)."""
    out = ["a dtype it does not take", "rank one more", "rank one less", "a dimension one larger",
           "a size of 0", "None"]
    if t.scalar:  # no rank less than []; [1] is its other valid shape (vLLM's scales)
        out[out.index("rank one less")] = "as [1]"
    allowed = op.type_vars.get(t.dtype, (t.dtype,))
    if any(d in _FLOATS for d in allowed):
        out.append("float64")  # without jax_enable_x64, JAX sees it as float32
    if any(d in ("int32", "int64") for d in allowed):
        out.append("int64")
    if t.shape:
        out.append("a strided view")  # every element apart: no layout but `strided` takes it
        if len(t.shape) + t.batch >= 2:
            out.append("a view of rows")  # a column slice: `rows` takes it
    if t.values_min is not None or t.values_max is not None:
        out.append("a value past its range")
    return out


def edges(op: _spec.Op) -> list:
    """Everything a call of `op` is tried with, in a fixed order: valid calls
    (several, as most of what users do is valid), calls differentiated, then
    each attribute's and each input's edges."""
    out = [("valid",)] * 4 + [("differentiated",)] * 3
    for a in op.attrs:
        out += [("attribute", a.name, e) for e in _attr_edges(a)]
    for t in op.requested_outputs:
        out += [("attribute", t.request_param, e) for e in _BOOL_KIND_NAMES]
    for t in op.inputs:
        out += [("input", t.name, e) for e in _input_edges(op, t)]
    return out


def case(op: _spec.Op, seed: int, index: int) -> Case:
    """Call `index` of `op` for `seed`: the edges are taken in an order the
    seed shuffles (so that N calls of one seed try N different edges, and
    every edge once N reaches their number), each materialised on a valid
    call drawn from the case's own generator."""
    menu = edges(op)
    order = np.random.default_rng([seed, _crc(op.name)]).permutation(len(menu))
    edge = menu[order[index % len(menu)]]
    rng = np.random.default_rng([seed, _crc(op.name), index])
    choices = op_problems.instantiations(op)
    dtypes = choices[rng.integers(len(choices))]
    optional = edge[0] == "input" or bool(rng.integers(2))  # an input's edge needs the input given
    p = op_problems.draw(op, dtypes, rng, with_optional=optional, asked=bool(rng.integers(2)))
    c = Case(op, seed, index, "valid", dtypes, list(p.inputs), dict(p.attrs))
    if edge[0] == "differentiated":
        c.edge, c.grad = "differentiated", True
    elif edge[0] == "attribute":
        _, name, what = edge
        a = next((a for a in op.attrs if a.name == name), None)
        if a is None:  # an output's return_<name> flag: a bool
            a = _spec.Attr(name, "bool")
        c.attrs[name] = _attr_value(a, what, c.attrs[name], p.call, rng)
        c.edge = f"attribute '{name}': {what}"
    elif edge[0] == "input":
        _, name, what = edge
        _input_edge(c, op.inputs.index(next(t for t in op.inputs if t.name == name)), what, p.call, rng)
    return c


def _input_edge(c: Case, i: int, what: str, call: _spec.Call, rng) -> None:
    t, x = c.op.inputs[i], c.inputs[i]
    c.edge = f"input '{t.name}': {what}"
    if what == "None":
        c.inputs[i] = None
    elif what == "a dtype it does not take":
        c.inputs[i] = x.astype(op_problems.numpy_dtype(op_problems.wrong_dtype(c.op, t)))
    elif what in ("float64", "int64"):
        c.inputs[i] = x.astype(np.float32).astype(what) if what == "float64" else x.astype(np.int64)
    elif what == "rank one more":
        c.inputs[i] = x[None, None] if t.scalar else x[None]  # a scalar's [1] is valid: [1, 1]
    elif what == "as [1]":
        c.inputs[i] = x.reshape(1)
    elif what == "rank one less":
        # below the spec's rank; an input of shape [...] (rows only) loses its rows
        c.inputs[i] = np.asarray(x[(0,) * min(x.ndim, x.ndim - len(t.shape) + 1)]) if x.ndim else x[None]
    elif what == "a dimension one larger":
        shape = list(x.shape)
        axis = int(rng.integers(len(shape))) if shape else None
        if axis is None:
            c.inputs[i] = np.resize(x, (2,)) if t.scalar else x[None]  # a scalar's [1] is valid: [2]
        else:
            shape[axis] += 1
            c.inputs[i] = np.resize(x, shape)
    elif what == "a size of 0":
        symbols = sorted({d for u in c.op.inputs for d in u.shape if isinstance(d, str)})
        symbol = symbols[rng.integers(len(symbols))] if symbols else None
        c.edge += f" ({symbol} = 0)" if symbol else " (a leading dimension)"
        for k, (u, y) in enumerate(zip(c.op.inputs, c.inputs)):
            if y is None:
                continue
            lead = y.ndim - len(u.shape)
            shape = [0 if (symbol is None and j == 0 and lead > 0) or (j >= lead and u.shape[j - lead] == symbol)
                     else n for j, n in enumerate(y.shape)]
            c.inputs[k] = y[tuple(slice(0, n) for n in shape)]
    elif what == "a strided view":
        c.views[i] = "strided"
    elif what == "a view of rows":
        c.views[i] = "rows"
    elif what == "a value past its range":
        y = x.copy()
        flat = y.reshape(-1)
        if flat.size:
            bounds = {**call.symbols, **{k: v for k, v in c.attrs.items() if type(v) is int}}
            if t.values_max is not None:
                past = op_problems._evaluate(t.values_max, bounds) + (0 if t.values_max_exclusive else 1)
            else:
                past = op_problems._evaluate(t.values_min, bounds) - (0 if t.values_min_exclusive else 1)
            flat[rng.integers(flat.size)] = past
        c.inputs[i] = y
    else:
        raise AssertionError(what)


# --- Outcomes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Value:
    """One output (or gradient): its dtype and shape, and its elements (None
    where the route computes shapes only: fake tensors)."""

    dtype: str
    shape: tuple
    data: np.ndarray | None


@dataclass(frozen=True)
class Refusal:
    """An exception, as a caller meets it: the kinds of handler that catch it
    (TypeError, ValueError, RuntimeError; OpTypeError is both a TypeError and
    a RuntimeError), and the text -- of the original exception where
    torch.compile wraps it."""

    kinds: frozenset
    text: str | None  # None: the report lost it (torch 2.11's torch.compile); the kinds are compared
    raised: str  # the class, for the report

    def __str__(self) -> str:
        return f"{self.raised}: {self.text.splitlines()[0] if self.text else '(its text not reported)'}"


@dataclass(frozen=True)
class Outcome:
    """What a route gave: the outputs in spec order (None for one not made)
    and, under differentiation, the gradient of each input (None for one that
    gets none); or a refusal."""

    values: tuple | None = None
    grads: tuple | None = None
    refusal: Refusal | None = None

    def __str__(self) -> str:
        if self.refusal is not None:
            return f"refuses: {self.refusal}"
        shown = ", ".join("None" if v is None else f"{v.dtype}{list(v.shape)}" for v in self.values)
        return f"runs: ({shown}){' with gradients' if self.grads is not None else ''}"


def _wrapper(e: BaseException) -> bool:
    """Whether `e` is torch.compile's wrapping of another exception."""
    module = type(e).__module__
    return (module.startswith(("torch._dynamo", "torch._inductor")) or
            str(e).startswith(("Dynamo failed to run FX node", "Failed running call_function")))


# torch.compile(fullgraph=True)'s reports of an exception that lost its object: one raised in code
# Dynamo traces (the wrappers' checks: it simulated the raise), named in its "Developer debug
# context" (torch 2.9: `raised exception OpTypeError([ConstantVariable(str: "...")])`; 2.15:
# `raised exception OpTypeError("...")`); one a fake kernel raised, which torch 2.15 quotes
# (`Dynamo failed to run FX node with fake tensors: ...: got OpValueError("...")`) with no cause.
_OBSERVED = re.compile(r"(?:raised exception|: got) (\w+)\((?:\[ConstantVariable\(str: )?(\\?['\"])(.*?)\2\)",
                       re.DOTALL)


# torch 2.11 names the class alone: `raised exception UserDefinedExceptionObjectVariable(OpTypeError)`.
_OBSERVED_CLASS = re.compile(r"raised exception UserDefinedExceptionObjectVariable\((\w+)\)")


def _observed(e: BaseException) -> tuple | None:
    """(class, text) of the exception torch.compile reports, where `e` quotes
    one; the text None where the report names the class alone."""
    if not (_wrapper(e) or type(e).__name__.startswith(("Unsupported", "Observed"))):
        return None
    known = {k.__name__: k for k in (TypeError, ValueError, RuntimeError, NotImplementedError,
                                     _spec.OpTypeError, _spec.OpValueError)}
    m = _OBSERVED.search(str(e))
    if m is not None:
        return known.get(m[1]), m[3].replace("\\'", "'")
    m = _OBSERVED_CLASS.search(str(e))
    return None if m is None else (known.get(m[1]), None)


def refused(e: BaseException) -> Outcome:
    """The refusal `e` is, unwrapped to the exception torch.compile reports
    (Dynamo wraps the fake kernel's, losing its type: the original is its
    cause or context; an exception raised where Dynamo traces is named in
    its report)."""
    while True:
        observed = _observed(e)
        if observed is not None and observed[0] is not None:
            cls, text = observed
            kinds = frozenset(k.__name__ for k in (TypeError, ValueError, RuntimeError) if issubclass(cls, k))
            return Outcome(refusal=Refusal(kinds, text, cls.__name__))
        if not _wrapper(e) or (e.__cause__ or e.__context__) is None:
            break
        e = e.__cause__ or e.__context__
    kinds = frozenset(k.__name__ for k in (TypeError, ValueError, RuntimeError) if isinstance(e, k))
    return Outcome(refusal=Refusal(kinds or frozenset({type(e).__name__}), str(e), type(e).__name__))


def value(x) -> Value | None:
    """An output of any route as a Value: a torch tensor (a fake one: shape
    and dtype alone), a JAX or numpy array."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        from torch._subclasses.fake_tensor import is_fake

        dtype = str(x.dtype).removeprefix("torch.")
        if is_fake(x) or x.device.type == "meta":
            return Value(dtype, tuple(x.shape), None)
        x = x.detach().cpu()
        if x.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
            return Value(dtype, tuple(x.shape), x.float().numpy().astype(np.float64))
        return Value(dtype, tuple(x.shape), _exact(x.numpy()))
    a = np.asarray(x)
    return Value(a.dtype.name, a.shape, _exact(a))


def _exact(a: np.ndarray) -> np.ndarray:
    """The elements in a type that holds each exactly: int64 for integers,
    float64 for the rest."""
    return a.astype(np.int64) if a.dtype.kind in "iub" else a.astype(np.float64)


def _spec_outputs(result) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]


# --- Routes ---------------------------------------------------------------------------------------


def _jax_arrays(route: str) -> bool:
    """Whether the op is handed JAX arrays (no strides; 32 bits without jax_enable_x64): JAX's routes and torchax's."""
    return route.startswith(("jax.", "torchax."))


def _x32(route: str) -> bool:
    """Whether the op is handed JAX arrays without jax_enable_x64, in which a 64-bit input becomes 32 bits."""
    return _jax_arrays(route) and not route.endswith("[x64]")


def _torch_facing(route: str) -> bool:
    """Whether the caller holds torch tensors and meets torch's exceptions and
    autograd: torch's routes and torchax's."""
    return route.startswith(("torch.", "torchax."))


def _torch_tensors(c: Case, device: str = "cpu", grad: bool = False) -> tuple:
    """The call's inputs as torch tensors on `device` (views where the case
    says), and the leaves that require grad (the floating inputs, where the
    case is differentiated; the op gets copies of them, so that one it updates
    in place is not a leaf)."""
    leaves, tensors = {}, []
    for i, x in enumerate(c.inputs):
        if x is None:
            tensors.append(None)
            continue
        if i in c.views:
            tensors.append(_view(x, c.views[i], device))
            continue
        t = to_torch(x, device)
        if grad and x.dtype.name in _FLOATS[:4]:
            leaves[i] = t.requires_grad_()
            t = t.clone()
        tensors.append(t)
    return tensors, leaves


def _view(x: np.ndarray, kind: str, device: str) -> torch.Tensor:
    """`x` as a view of a wider tensor: every other element of its last axis
    (strided), or a column slice (rows: each row dense, the rows apart)."""
    shape = x.shape
    if kind == "strided":
        wide = torch.zeros(*shape[:-1], 2 * shape[-1], dtype=to_torch(x[:0]).dtype).to(device)
        view = wide[..., ::2]
    else:
        wide = torch.zeros(*shape[:-1], shape[-1] + 3, dtype=to_torch(x[:0]).dtype).to(device)
        view = wide[..., 1:1 + shape[-1]]
    view.copy_(to_torch(x, device))
    return view


def _cotangent(shape: tuple, k: int) -> np.ndarray:
    """The weight of output k in the loss: fixed, non-zero, different per element."""
    n = int(np.prod(shape, dtype=np.int64))
    return np.cos(np.arange(n) * 0.7 + k + 1).reshape(shape).astype(np.float32)


def _loss_outputs(op: _spec.Op) -> list:
    """The outputs the loss reads: those the backward takes a gradient of (an
    output it takes none of is not differentiable; JAX refuses a gradient
    reaching it, torch gives it none), or every output of an op without one."""
    if op.backward is None:
        return [True] * len(op.outputs)
    takes = {name for kind, name in op.backward.inputs if kind == "cotangent"}
    return [o.name in takes for o in op.outputs]


def _torch_loss(op: _spec.Op, outs: Sequence, leaves: dict):
    """sum(output * cotangent) over the floating outputs, plus 2 * each leaf:
    a gradient the op drops shows as exactly 2."""
    total = sum((leaf.float() * 2).sum() for leaf in leaves.values())
    for k, (o, used) in enumerate(zip(outs, _loss_outputs(op))):
        if used and o is not None and str(o.dtype).removeprefix("torch.") in _FLOATS:
            total = total + (o.float() * torch.from_numpy(_cotangent(tuple(o.shape), k)).to(o.device)).sum()
    return total


def run_jax(c: Case, api_version: int) -> Outcome:
    f = getattr(jops, c.op.name)
    return Outcome(tuple(value(o) for o in _spec_outputs(f(*c.inputs, **c.attrs, api_version=api_version))))


def run_jax_x64(c: Case) -> Outcome:
    """The eager call with jax_enable_x64, as a user with 64-bit data runs it."""
    with jax.enable_x64(True):
        return run_jax(c, 4)


def run_jax_jit(c: Case, api_version: int) -> Outcome:
    f = getattr(jops, c.op.name)
    jitted = jax.jit(lambda *xs: f(*xs, **c.attrs, api_version=api_version))
    return Outcome(tuple(value(o) for o in _spec_outputs(jitted(*c.inputs))))


def run_jax_vmap(c: Case) -> Outcome:
    """jax.vmap over a new leading axis of two copies of the call: item 0."""
    f = getattr(jops, c.op.name)
    stacked = [None if x is None else np.stack([x, x]) for x in c.inputs]
    mapped = jax.vmap(lambda *xs: f(*xs, **c.attrs), in_axes=[None if x is None else 0 for x in stacked])
    return Outcome(tuple(None if o is None else value(np.asarray(o)[0]) for o in _spec_outputs(mapped(*stacked))))


def run_jax_grad(c: Case) -> Outcome:
    """jax.value_and_grad of the loss `_torch_loss` computes in torch, with
    respect to each floating input."""
    f = getattr(jops, c.op.name)
    floating = [i for i, x in enumerate(c.inputs) if x is not None and x.dtype.name in _FLOATS[:4]]
    used = _loss_outputs(c.op)

    def loss(*leaves):
        xs = list(c.inputs)
        for i, leaf in zip(floating, leaves):
            xs[i] = leaf
        outs = _spec_outputs(f(*xs, **c.attrs))
        total = sum((leaf.astype(np.float32) * 2).sum() for leaf in leaves)
        for k, (o, u) in enumerate(zip(outs, used)):
            if u and o is not None and o.dtype.name in _FLOATS:
                total = total + (o.astype(np.float32) * _cotangent(o.shape, k)).sum()
        return total, outs

    if not floating:  # nothing to differentiate: the call itself
        return Outcome(tuple(value(o) for o in loss()[1]), (None,) * len(c.inputs))
    (_, outs), grads = jax.value_and_grad(loss, argnums=tuple(range(len(floating))), has_aux=True)(
        *[c.inputs[i] for i in floating])
    by_input = dict(zip(floating, grads))
    return Outcome(tuple(value(o) for o in outs), tuple(value(by_input.get(i)) for i in range(len(c.inputs))))


class _Passthrough(TorchFunctionMode):
    """A torch function mode that changes nothing: under it the wrapper takes
    its full route (torch.ops, autograd, the dispatcher) instead of the direct one."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def run_torch(c: Case, full: bool = False) -> Outcome:
    tensors, _ = _torch_tensors(c, grad=c.grad)
    with _Passthrough() if full else contextlib.nullcontext():
        outs = _spec_outputs(getattr(tops, c.op.name)(*tensors, **c.attrs))
    return Outcome(tuple(value(o) for o in outs))


def run_torch_ops(c: Case) -> Outcome:
    """``torch.ops.<ns>.<op>`` with the spec's schema: a dtype attribute named
    by a str as the schema's ScalarType (torch_arrays.torch_attrs); the
    schema's result in spec order (an output updated in place is its input;
    one on request not asked for is None, where the schema returns it with no
    elements)."""
    op = c.op
    tensors, _ = _torch_tensors(c, grad=c.grad)
    attrs = {k: getattr(torch, v) if k in op.dtype_attrs.values() and isinstance(v, str) and
             isinstance(getattr(torch, v, None), torch.dtype) else v for k, v in c.attrs.items()}
    packet = getattr(getattr(torch.ops, op.torch_namespace), op.name)
    result = packet(*tensors, **attrs)
    fresh = iter([] if result is None else _spec_outputs(result))
    names = [t.name for t in op.inputs]
    outs = []
    for o in op.outputs:
        if o.alias:
            outs.append(tensors[names.index(o.alias)])
            continue
        out = next(fresh)
        unasked = o.on_request and c.attrs.get(o.request_param) is False
        outs.append(None if unasked and tuple(out.shape) == (0,) else out)
    return Outcome(tuple(value(o) for o in outs))


def run_torch_compile(c: Case) -> Outcome:
    tensors, _ = _torch_tensors(c, grad=c.grad)
    torch._dynamo.reset()  # a fresh compile each call: no cache from another call's attributes
    f = torch.compile(lambda *ts: getattr(tops, c.op.name)(*ts, **c.attrs), fullgraph=True)
    return Outcome(tuple(value(o) for o in _spec_outputs(f(*tensors))))


def run_torch_fake(c: Case) -> Outcome:
    from torch._subclasses.fake_tensor import FakeTensorMode

    tensors, _ = _torch_tensors(c, grad=c.grad)
    with FakeTensorMode() as mode:
        fakes = [None if t is None else mode.from_tensor(t) for t in tensors]
        outs = _spec_outputs(getattr(tops, c.op.name)(*fakes, **c.attrs))
    return Outcome(tuple(value(o) for o in outs))


def run_torch_autograd(c: Case, device: str = "cpu") -> Outcome:
    """The wrapper on inputs that require grad, then backward() of the loss."""
    tensors, leaves = _torch_tensors(c, device, grad=True)
    outs = _spec_outputs(getattr(tops, c.op.name)(*tensors, **c.attrs))
    values = tuple(value(o) for o in outs)  # before backward: an output updated in place is read now
    if leaves:
        _torch_loss(c.op, outs, leaves).backward()
    return Outcome(values, tuple(None if i not in leaves else value(leaves[i].grad) for i in range(len(c.inputs))))


def _torchax_value(x):
    from torchax import interop

    return None if x is None else value(np.asarray(interop.jax_view(x.detach())))


def run_torchax(c: Case, compiled: bool = False) -> Outcome:
    import torchax

    with torchax.default_env():
        tensors, _ = _torch_tensors(c, "jax", grad=c.grad)
        f = lambda *ts: getattr(tops, c.op.name)(*ts, **c.attrs)  # noqa: E731
        outs = _spec_outputs((torchax.compile(f) if compiled else f)(*tensors))
        return Outcome(tuple(_torchax_value(o) for o in outs))


def run_torchax_autograd(c: Case) -> Outcome:
    import torchax

    with torchax.default_env():
        tensors, leaves = _torch_tensors(c, "jax", grad=True)
        outs = _spec_outputs(getattr(tops, c.op.name)(*tensors, **c.attrs))
        values = tuple(_torchax_value(o) for o in outs)
        if leaves:
            _torch_loss(c.op, outs, leaves).backward()
        grads = tuple(None if i not in leaves else _torchax_value(leaves[i].grad) for i in range(len(c.inputs)))
        return Outcome(values, grads)


@dataclass(frozen=True)
class Route:
    """An entry point: `run` makes the call that way. `process`: "torchax"
    for the routes that import torchax (tests/torchax: a process of their
    own). `grad`: the route differentiates, and runs on differentiated calls only."""

    run: Callable[[Case], Outcome]
    process: str = "main"
    grad: bool = False


def _jax_routes() -> dict:
    versions = sorted({v for op in _ops.OPS for v in op.handlers.get("cpu", ())}, reverse=True)
    out = {}
    for v in versions:
        out[f"jax.eager[v{v}]"] = Route(lambda c, v=v: run_jax(c, v))
        out[f"jax.jit[v{v}]"] = Route(lambda c, v=v: run_jax_jit(c, v))
    return out




ROUTES: dict = {
    # JAX: each api_version XLA:CPU runs (docs/spec.md, xla.api_versions), eager and jitted.
    **_jax_routes(),
    "jax.eager[x64]": Route(run_jax_x64),
    "jax.vmap": Route(run_jax_vmap),
    "jax.grad": Route(run_jax_grad, grad=True),
    # The torch wrapper: a plain eager call takes its direct route; under a function mode, its full one.
    "torch.direct": Route(run_torch),
    "torch.full": Route(lambda c: run_torch(c, full=True)),
    "torch.ops": Route(run_torch_ops),
    "torch.compile": Route(run_torch_compile),
    "torch.fake": Route(run_torch_fake),
    "torch.autograd": Route(run_torch_autograd, grad=True),
    "torchax.eager": Route(run_torchax, "torchax"),
    "torchax.compile": Route(lambda c: run_torchax(c, compiled=True), "torchax"),
    "torchax.autograd": Route(run_torchax_autograd, "torchax", grad=True),
}
# What the torchax process runs beside torchax's routes, to hold them to the others (tests/python
# compares these with every other route).
TORCHAX_REFERENCES = ("jax.eager[v4]", "jax.jit[v4]", "jax.grad", "torch.direct", "torch.autograd")


def applies(route: str, c: Case) -> bool:
    """Whether `route` runs call `c`: every route on CPU ops, the gradient
    routes on differentiated calls, an api_version where the op has it."""
    if "cpu" not in c.op.platforms or (ROUTES[route].grad and not c.grad):
        return False
    if route == "jax.vmap" and all(x is None for x in c.inputs):
        return False  # nothing to map over (jax.vmap says so itself)
    m = re.search(r"\[v(\d)\]", route)
    return m is None or int(m.group(1)) in c.op.handlers.get("cpu", ())


def run_route(route: str, c: Case) -> Outcome:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ops' "no autograd kernel" and JAX's dtype warnings
        try:
            return ROUTES[route].run(c)
        except Exception as e:  # noqa: BLE001 (every refusal is an outcome)
            return refused(e)


# --- The comparison -------------------------------------------------------------------------------


def _same_data(a: Value, b: Value) -> str | None:
    """Whether two values hold the same elements: integers, bool and 8-bit
    floats exactly; the other floats to the dtype's tolerance, relative to
    their norm (op_references.TOLERANCE), with NaN and infinities in the same
    places."""
    if a.data is None or b.data is None:
        return None  # shapes only (fake tensors)
    x, y = a.data, b.data
    if a.dtype not in ref.TOLERANCE or not x.size:
        return None if np.array_equal(x, y, equal_nan=True) else "different elements"
    finite = np.isfinite(x) & np.isfinite(y)
    if not np.array_equal(np.where(finite, 0, x), np.where(finite, 0, y), equal_nan=True):
        return "NaN or infinity in different places"
    error = np.linalg.norm(x[finite] - y[finite]) / max(np.linalg.norm(y[finite]), np.sqrt(x.size))
    return None if error < ref.TOLERANCE[a.dtype] else f"relative error {error:.3g}"


def _differ_values(what: str, xs: tuple, ys: tuple) -> str | None:
    if len(xs) != len(ys):
        return f"{len(xs)} {what}s against {len(ys)}"
    for k, (a, b) in enumerate(zip(xs, ys)):
        if (a is None) != (b is None):
            return f"{what} {k}: {'None' if a is None else 'made'} against {'None' if b is None else 'made'}"
        if a is None:
            continue
        if (a.dtype, a.shape) != (b.dtype, b.shape):
            return f"{what} {k}: {a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}"
        why = _same_data(a, b)
        if why:
            return f"{what} {k}: {why}"
    return None


def differ(a: Outcome, b: Outcome) -> str | None:
    """The strict comparison: None where the two agree, else how they differ."""
    if a.refusal is not None or b.refusal is not None:
        if a.refusal is None or b.refusal is None:
            return "one refuses, the other runs"
        if a.refusal.kinds != b.refusal.kinds:
            return f"kinds {sorted(a.refusal.kinds)} against {sorted(b.refusal.kinds)}"
        if a.refusal.text is None or b.refusal.text is None:
            return None
        return None if a.refusal.text == b.refusal.text else "texts differ"
    why = _differ_values("output", a.values, b.values)
    if why is None and a.grads is not None and b.grads is not None:
        why = _differ_values("gradient of input", a.grads, b.grads)
    return why


@dataclass(frozen=True)
class Intended:
    """A difference between two routes that is meant, and why. `when(case,
    route, other)` says whether it holds for a pair (asked both ways round);
    `then(route, outcome)` rewrites each of the pair's outcomes before the
    strict comparison, or returns None: the pair is not compared. Without
    `then`, a pair it holds for is not compared."""

    why: str
    when: Callable[[Case, str, str], bool]
    then: Callable[[str, Outcome], Outcome | None] | None = None


def _wide_input(c: Case) -> bool:
    return any(x is not None and x.dtype.name in ("float64", "int64") for x in c.inputs)


def _layout_refused(c: Case) -> bool:
    """A view whose strides its input's layout does not take."""
    return any(c.op.inputs[i].layout == "contiguous" or (kind == "strided" and c.op.inputs[i].layout == "rows")
               for i, kind in c.views.items())


def _rewrite_refusal(rewrite: Callable[[Refusal], Refusal]) -> Callable[[str, Outcome], Outcome]:
    return lambda route, o: o if o.refusal is None else replace(o, refusal=rewrite(o.refusal))


def _rewrite_text(pattern: re.Pattern, to: str | Callable) -> Callable[[str, Outcome], Outcome]:
    return _rewrite_refusal(lambda r: r if r.text is None else replace(r, text=pattern.sub(to, r.text)))


_DTYPE_HINT = re.compile(r" \(convert it explicitly, e\.g\. [^)]*\)\)$")
# A refusal of an argument's Python type: torch's schema parser's words, or opgen's.
_WRONG_PYTHON_TYPE = re.compile(
    r"^\w+::\w+\(\) Expected a value of type '[^']*' for argument '(?P<torch>\w+)' but instead found type .*"
    r"|^\w+: (?:attribute '(?P<attr>\w+)'|(?P<flag>return_\w+)) (?:element \d+ )?must be an? \w+.*", re.DOTALL)
_NO_BACKWARD = re.compile(r"^(\w+ has no backward \(its spec declares none\)), so .*$", re.DOTALL)


def _python_type(m: re.Match) -> str:
    return f"argument '{m['torch'] or m['attr'] or m['flag']}' of a wrong Python type"


def _records_autograd(route: str) -> bool:
    """Whether a tensor that requires grad is recorded by autograd on `route`:
    torch's routes and torchax eager, not JAX's nor torchax.compile (jax.jit)."""
    return route.startswith("torch.") or route in ("torchax.eager", "torchax.autograd")


def _in_place_without_backward(c: Case) -> bool:
    return c.grad and bool(c.op.aliased_outputs) and c.op.backward is None and c.op.differentiable


# The edges that give an attribute a value of another Python kind (not another value of its kind).
_KIND_EDGES = frozenset(_INT_KIND_NAMES + _BOOL_KIND_NAMES + _FLOAT_KIND_NAMES + _ENUM_KIND_NAMES
                        + _ARRAY_KIND_NAMES + ("numpy dtype", "jax.numpy type", "int 0", "bool True", "None"))


def _numpy_valued(v) -> bool:
    return isinstance(v, (np.ndarray, np.generic)) or (isinstance(v, list) and any(_numpy_valued(e) for e in v))


def _attribute_of_another_kind(c: Case) -> bool:
    what = c.edge.partition(": ")[2]
    return c.edge.startswith("attribute '") and what in _KIND_EDGES and what != "a name it does not have"


def _other_dtype_spelling(c: Case) -> bool:
    """A dtype attribute given as a numpy dtype or jax.numpy's type (which
    has one), neither a torch.dtype nor a name of one; or a name of no
    torch dtype."""
    def numpy_or_jax(v) -> bool:
        return isinstance(v, np.dtype) or (not isinstance(v, (torch.Tensor, np.ndarray, np.generic))
                                           and isinstance(getattr(v, "dtype", None), np.dtype))

    def not_torch(v) -> bool:  # a name torch has no dtype of (the harness passes torch's names as torch.dtype)
        return isinstance(v, str) and not isinstance(getattr(torch, v, None), torch.dtype)

    return any(numpy_or_jax(c.attrs.get(a)) or not_torch(c.attrs.get(a)) for a in c.op.dtype_attrs.values())


INTENDED = (
    Intended("Without jax_enable_x64 JAX converts a 64-bit input to 32 bits before the op sees it (jax.jit, "
             "jax.vmap, torchax; README, torchax: 'the ops' f64 instantiations need it'): such a call is "
             "compared among the routes that run without it and among the others, not across.",
             lambda c, r, s: _wide_input(c) and _x32(r) and not _x32(s)),
    Intended("JAX arrays have no strides (torchax hands JAX a view's values): a view whose strides the input's "
             "layout does not take is the torch kernels' to refuse (README: 'call .contiguous()'), and the "
             "routes of JAX arrays run its values.",
             lambda c, r, s: _layout_refused(c) and _jax_arrays(r) and not _jax_arrays(s)),
    Intended("A route that differentiates also answers whether the op can be differentiated: beside one that "
             "does not, its values are compared, not its refusal.",
             lambda c, r, s: ROUTES[r].grad and not ROUTES[s].grad,
             lambda route, o: None if ROUTES[route].grad and o.refusal is not None else o),
    Intended("torch's C++ kernels raise every refusal as a RuntimeError (the stable ABI has no other type), and "
             "opgen's OpTypeError and OpValueError are RuntimeErrors too, so that torch code catches them alike: "
             "beside a route that torch code calls, the kind compared is whether `except RuntimeError` catches it.",
             lambda c, r, s: _torch_facing(r),
             _rewrite_refusal(lambda r: replace(r, kinds=r.kinds & {"RuntimeError"}))),
    Intended("A dtype refusal suggests the conversion in the terms of the framework whose check wrote it "
             "(docs/architecture.md: 'x.astype(jnp.float32)', 'x.to(torch.float32)').",
             lambda c, r, s: _jax_arrays(r) and not _jax_arrays(s),
             _rewrite_text(_DTYPE_HINT, "")),
    Intended("An argument of the wrong Python type is refused before the rules, by each framework in its own "
             "words (tests/python/test_refusals.py; docs/architecture.md: 'a str for an int is its TypeError'): "
             "torch's schema parser names the argument and the type it expected.",
             lambda c, r, s: _torch_facing(r),
             _rewrite_text(_WRONG_PYTHON_TYPE, _python_type)),
    Intended("torch.ops.<ns>.<op> hands its arguments to torch's schema parser, which converts a value of another "
             "Python kind before any kernel runs -- a bool, a numpy scalar, a 0-d array or tensor for a number, "
             "bytes for a str, an int for a dtype (ScalarType's code), bools for ints -- as it does for "
             "torch.ops.aten.topk(x, torch.tensor(2.7)) (README, Attributes); where it converts, the converted value "
             "runs or is refused, where the wrappers refuse the kind itself.",
             lambda c, r, s: r == "torch.ops" and _attribute_of_another_kind(c)),
    Intended("torch's schema parser refuses an int past int64 for an int argument in its own words, before any "
             "kernel runs.",
             lambda c, r, s: r == "torch.ops" and "past int64" in c.edge,
             # (torch's words may have become _WRONG_PYTHON_TYPE's summary already.)
             _rewrite_text(re.compile(r"^.*(?:past|does not fit) (?:int64|i64).*$|^argument '\w+' of a wrong Python "
                                      r"type$", re.DOTALL), "an int past int64")),
    Intended("torch.compile's Dynamo traces a numpy value as an array (a numpy scalar is a 0-d array to the "
             "code it traces), so under torch.compile an attribute given as a numpy value meets the check of an "
             "array, not of the scalar it was (README, Limits: pass attributes as Python values).",
             lambda c, r, s: r == "torch.compile" and any(_numpy_valued(v) for v in c.attrs.values())),
    Intended("torch's dispatcher picks a kernel by the tensors among the arguments: torch.ops.<ns>.<op> with every "
             "input None reaches no kernel (torch's NotImplementedError, before opgen's check).",
             lambda c, r, s: r == "torch.ops" and all(x is None for x in c.inputs)),
    Intended("torch.ops.<ns>.<op> takes a dtype attribute as the schema's ScalarType, a torch.dtype (docs/spec.md, "
             "Attributes: 'the wrapper also takes the name'); the wrappers take a numpy dtype or jax.numpy's type "
             "too.",
             lambda c, r, s: r == "torch.ops" and _other_dtype_spelling(c)),
    Intended("An op without a backward is refused under differentiation with the way to stop the gradient in "
             "each framework's terms (jax.lax.stop_gradient; torch.no_grad()): the words before it are compared.",
             lambda c, r, s: c.grad and _torch_facing(r) and not _torch_facing(s),
             _rewrite_text(_NO_BACKWARD, r"\1")),
    Intended("torch refuses at the call an op that updates an input in place and has no backward when an input "
             "requires grad (README, Limits: the update cannot be recorded); the routes without autograd (JAX's "
             "that do not differentiate, and torchax.compile: jax.jit) have nothing to refuse.",
             lambda c, r, s: _in_place_without_backward(c) and _records_autograd(r) and r != "torch.ops"
             and not ROUTES[r].grad and not _records_autograd(s) and not ROUTES[s].grad),
    Intended("torch.ops.<ns>.<op> called directly has no autograd formula for an op without a backward (README, "
             "Limits: 'torch's own behaviour (a warning and no gradient)'): it runs the in-place update that the "
             "wrapper refuses under autograd.",
             lambda c, r, s: _in_place_without_backward(c) and r == "torch.ops" and _torch_facing(s)),
)


def compare(c: Case, r: str, a: Outcome, s: str, b: Outcome) -> str | None:
    """How routes r and s differ on call c (None where they agree, or where
    an intended difference leaves the pair uncompared)."""
    for d in INTENDED:
        if d.when(c, r, s) or d.when(c, s, r):
            if d.then is None:
                return None
            a, b = d.then(r, a), d.then(s, b)
            if a is None or b is None:
                return None
    return differ(as_multisets(c.op, a), as_multisets(c.op, b))


def as_multisets(op: _spec.Op, o: Outcome) -> Outcome:
    """`o` with each output whose order the spec leaves unspecified
    (`unordered: true`) sorted: compared as a multiset."""
    if o.values is None or not any(t.unordered for t in op.outputs):
        return o
    return replace(o, values=tuple(
        v if v is None or v.data is None or not t.unordered else replace(v, data=np.sort(v.data, axis=None).reshape(v.shape))
        for t, v in zip(op.outputs, o.values)))


# --- Running --------------------------------------------------------------------------------------


@dataclass
class Disagreement:
    case: Case
    pairs: list  # (route, route, how they differ)
    outcomes: dict  # route -> Outcome
    blamed: set  # the routes counted as disagreeing (_blame)

    def __str__(self) -> str:
        lines = [self.case.describe()]
        for route, o in self.outcomes.items():
            lines.append(f"  {'*' if route in self.blamed else ' '} {route:18} {o}")
        shown = set()
        for r, s, why in self.pairs:  # one pair for each route counted as disagreeing
            blamed = r if r in self.blamed else s
            if blamed not in shown:
                shown.add(blamed)
                lines.append(f"    {r} vs {s}: {why}")
        return "\n".join(lines)


@dataclass
class Report:
    counts: dict = field(default_factory=dict)  # (op, route) -> [calls, values, refusals, disagreements, seconds]
    disagreements: list = field(default_factory=list)

    def table(self) -> str:
        rows = [f"{'op':36} {'route':18} {'calls':>6} {'values':>7} {'refusals':>9} {'disagree':>9} {'seconds':>8}"]
        for (op, route), (n, v, r, d, t) in sorted(self.counts.items()):
            rows.append(f"{op:36} {route:18} {n:6} {v:7} {r:9} {d:9} {t:8.1f}")
        return "\n".join(rows)

    def text(self) -> str:
        listed = "\n\n".join(str(d) for d in self.disagreements)
        return f"{self.table()}\n\n{len(self.disagreements)} call(s) with a disagreement\n\n{listed}"


def _blame(pairs: list) -> set:
    """The routes to count as disagreeing: the fewest that cover every failing
    pair, greedily (one route against all the others is that route)."""
    pairs = [set(p[:2]) for p in pairs]
    blamed = set()
    while pairs:
        counts: dict = {}
        for p in pairs:
            for r in p:
                counts[r] = counts.get(r, 0) + 1
        worst = max(counts, key=lambda r: counts[r])
        blamed.add(worst)
        pairs = [p for p in pairs if worst not in p]
    return blamed


def run_case(c: Case, routes: Sequence) -> tuple:
    """The outcome of each route that applies, the pairs that disagree, and the seconds each route took."""
    outcomes, seconds = {}, {}
    for r in routes:
        if applies(r, c):
            start = time.perf_counter()
            outcomes[r] = run_route(r, c)
            seconds[r] = time.perf_counter() - start
    names = list(outcomes)
    failing = []
    for i, r in enumerate(names):
        for s in names[i + 1:]:
            why = compare(c, r, outcomes[r], s, outcomes[s])
            if why is not None:
                failing.append((r, s, why))
    return outcomes, failing, seconds


def run(ops: Sequence, seed: int, calls: int, routes: Sequence, limits: dict | None = None,
        indices: Sequence | None = None, progress: Callable[[str], None] | None = None) -> Report:
    """Calls 0 .. calls - 1 (or `indices`) of each op through `routes`; a
    route named in `limits` runs on the first that many calls only (torch.compile
    costs a second a call). `progress` is told of each op done."""
    report = Report()
    limits = limits or {}
    for op in ops:
        start, before = time.perf_counter(), len(report.disagreements)
        for index in (indices if indices is not None else range(calls)):
            c = case(op, seed, index)
            # A replay (`indices`) runs every route; a run, the costly ones on its first calls only.
            chosen = list(routes) if indices is not None else [r for r in routes if index < limits.get(r, calls)]
            outcomes, failing, seconds = run_case(c, chosen)
            blamed = _blame(failing)
            for route, o in outcomes.items():
                n = report.counts.setdefault((op.name, route), [0, 0, 0, 0, 0.0])
                n[0] += 1
                n[4] += seconds[route]
                n[3 if route in blamed else 2 if o.refusal is not None else 1] += 1
            if failing:
                report.disagreements.append(Disagreement(c, failing, outcomes, blamed))
        if progress is not None:
            progress(f"{op.name}: {len(report.disagreements) - before} call(s) with a disagreement "
                     f"({time.perf_counter() - start:.0f} s)")
    return report


def main(argv: Sequence | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "little"))
    parser.add_argument("--calls", type=int, default=200, help="calls per op (default 200)")
    parser.add_argument("--compile-calls", type=int, default=None,
                        help="of which torch.compile and torchax.compile run the first N (default: calls / 4)")
    parser.add_argument("--ops", default="", help="comma-separated op names (default: every op of the package)")
    parser.add_argument("--routes", default="", help=f"comma-separated routes (default: all): {', '.join(ROUTES)}")
    parser.add_argument("--index", type=int, action="append", help="run call INDEX alone (repeatable)")
    args = parser.parse_args(argv)
    ops = [getattr(_ops, name).OP for name in args.ops.split(",")] if args.ops else list(_ops.OPS)
    routes = args.routes.split(",") if args.routes else list(ROUTES)
    unknown = set(routes) - set(ROUTES)
    if unknown:
        parser.error(f"no route named {', '.join(sorted(unknown))}")
    compile_calls = args.compile_calls if args.compile_calls is not None else max(args.calls // 4, 1)
    limits = {"torch.compile": compile_calls, "torchax.compile": compile_calls}
    torchax_routes = [r for r in routes if ROUTES[r].process == "torchax"]
    child = None
    if torchax_routes and any(ROUTES[r].process == "main" and r not in TORCHAX_REFERENCES for r in routes):
        # torchax changes torch's state for the process that imports it: its routes, with the
        # references that hold them to the rest, run in a process of their own.
        argv_child = [sys.executable, __file__, "--seed", str(args.seed), "--calls", str(args.calls),
                      "--compile-calls", str(compile_calls), "--ops", ",".join(op.name for op in ops),
                      "--routes", ",".join(torchax_routes + [r for r in TORCHAX_REFERENCES if r in routes])]
        for index in args.index or ():
            argv_child += ["--index", str(index)]
        child = subprocess.Popen(argv_child, stdout=subprocess.PIPE, text=True)
        routes = [r for r in routes if ROUTES[r].process == "main"]
    print(f"seed {args.seed}, {args.calls} calls per op, routes: {', '.join(routes)}", flush=True)
    report = run(ops, args.seed, args.calls, routes, limits, indices=args.index,
                 progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(report.text(), flush=True)
    failed = bool(report.disagreements)
    if child is not None:
        out, _ = child.communicate()
        print("\n--- torchax, in a process of its own ---\n" + out)
        failed = failed or child.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
