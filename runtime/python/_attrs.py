"""Checks of attribute values shared by the JAX and PyTorch runtimes
(framework-independent): ranges, enums and integer arrays. Every binding
checks them again in C++."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def check_range(op: str, subject: str, value, minimum=None, maximum=None) -> None:
    """Refuses `value` outside the spec's inclusive [minimum, maximum] (NaN
    never passes); `subject` names it: "attribute 'eps'"."""
    if (minimum is not None and not value >= minimum) or (maximum is not None and not value <= maximum):
        raise ValueError(
            f"{op}: {subject} = {value} is outside its range "
            f"[{'' if minimum is None else minimum}, {'' if maximum is None else maximum}]"
        )


def enum_index(op: str, name: str, value, values: Sequence[str]) -> int:
    """The index of `value` among the attribute's `values` (what the
    descriptors and the torch kernels carry)."""
    if not isinstance(value, str):
        raise TypeError(f"{op}: attribute '{name}' must be a str, one of {', '.join(values)}; "
                        f"not {type(value).__name__}")
    try:
        return values.index(value)
    except ValueError:
        raise ValueError(f"{op}: attribute '{name}' is {value!r}; it must be one of "
                         f"{', '.join(values)}") from None


def int_list(op: str, name: str, value, numpy_type: str, size=None, minimum=None, maximum=None) -> list:
    """An integer-array attribute as a list of Python ints, checked against
    the element type, the spec's size and its range."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"{op}: attribute '{name}' must be a sequence of ints, not {type(value).__name__}")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise TypeError(f"{op}: attribute '{name}' must be one-dimensional, not of shape {value.shape}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{op}: attribute '{name}' element {i} must be an int, not {type(v).__name__}")
        out.append(int(v))
    if size is not None and len(out) != size:
        raise ValueError(f"{op}: attribute '{name}' has {len(out)} elements; the spec fixes its size at {size}")
    low, high = _INT_RANGES[numpy_type]
    for i, v in enumerate(out):
        if not low <= v <= high:
            raise ValueError(f"{op}: attribute '{name}' element {i} = {v} does not fit {numpy_type}")
        check_range(op, f"attribute '{name}' element {i}", v, minimum, maximum)
    return out
