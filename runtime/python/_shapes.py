"""Shape helpers shared by the JAX and PyTorch runtimes (framework-independent)."""

from __future__ import annotations

from collections.abc import Sequence


def shape_text(shape: Sequence[int | str], batch: bool = False) -> str:
    """A spec's shape as written: "[..., N, 4]"."""
    return "[" + ", ".join((["..."] if batch else []) + [str(d) for d in shape]) + "]"


def product(dims) -> int:
    """The element count of `dims` (the flattened batch count of '...')."""
    n = 1
    for d in dims:
        n *= int(d)
    return n
