"""Support shared by every generated JAX wrapper (hand-written, op-independent).

The generated module ``<package>.jax`` calls these to register the custom-call
targets and to check arguments before they reach XLA, so that a wrong dtype or
shape is a Python exception that names the op, the argument and the spec's
declaration, raised at trace time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ._attrs import check_range
from ._shapes import product, shape_text  # noqa: F401  (product: the generated wrappers call _rt.product)

_JAX_PLATFORM = {"cpu": "cpu", "cuda": "CUDA"}


def register_targets(targets: Mapping[str, Mapping[int, Mapping[str, object]]],
                     batch_partitionable: Sequence[str] = ()) -> None:
    """Registers every capsule of ``_C.targets()`` with JAX.

    api_version 4 handlers are typed-FFI targets (JAX's ``api_version=1``);
    legacy shims are registered with JAX's ``api_version=0``. Typed-FFI targets
    named in ``batch_partitionable`` are also registered as batch-partitionable.
    """
    for platform, versions in targets.items():
        for api_version, names in versions.items():
            for name, capsule in names.items():
                jax.ffi.register_ffi_target(
                    name,
                    capsule,
                    platform=_JAX_PLATFORM[platform],
                    api_version=1 if api_version == 4 else 0,
                )
    # Lets XLA's SPMD partitioner split the leading ('...') dimensions.
    for name in batch_partitionable:
        jax.ffi.register_ffi_target_as_batch_partitionable(name)


def as_array(op: str, name: str, x):
    """Input ``name``: ``x`` itself when it is an array (or tracer), else ``np.asarray(x)``."""
    if x is None:
        raise TypeError(f"{op}: input '{name}' is required, not None")
    return x if hasattr(x, "dtype") and hasattr(x, "shape") else np.asarray(x)


def bind_dtypes(op: str, tensors, type_vars: Mapping[str, Sequence[str]]) -> dict:
    """Checks each input's dtype against the spec and binds the type variables.

    ``tensors`` holds ``(name, dtype, spec)``, where spec is a dtype name or
    a type variable of ``type_vars`` (which maps it to its allowed dtypes).
    Returns the dtype of each type variable. Never casts.
    """
    bound: dict = {}
    by: dict = {}
    for name, dtype, spec in tensors:
        dtype = jnp.dtype(dtype)
        if spec in type_vars:
            if spec in bound:
                if dtype != bound[spec]:
                    raise TypeError(
                        f"{op}: input '{name}' has dtype {dtype}, but its dtype {spec} is "
                        f"{bound[spec]} (bound by input '{by[spec]}')"
                    )
            elif dtype.name not in type_vars[spec]:
                raise TypeError(
                    f"{op}: input '{name}' has dtype {dtype}; {spec} must be one of "
                    f"{', '.join(type_vars[spec])} (convert it explicitly, e.g. "
                    f"x.astype(jnp.{type_vars[spec][-1]}))"
                )
            else:
                bound[spec], by[spec] = dtype, name
        elif dtype != jnp.dtype(spec):
            raise TypeError(
                f"{op}: input '{name}' has dtype {dtype}; the spec declares {spec} "
                f"(convert it explicitly, e.g. x.astype(jnp.{spec}))"
            )
    return bound


def bind_shapes(op: str, inputs) -> tuple[dict, tuple]:
    """Checks ranks, binds each shape symbol to its first input dimension and
    checks the rest; returns the symbols and the batch dimensions ('...').

    ``inputs`` holds ``(name, shape, declared, batch)``: the declared
    dimensions after '...', and whether the shape starts with '...'.
    """
    values: dict[str, int] = {}
    origin: dict[str, tuple[str, int]] = {}
    batch_dims = None
    batch_source = None
    for name, shape, declared, batch in inputs:
        shape = tuple(shape)
        if len(shape) != len(declared) and not (batch and len(shape) >= len(declared)):
            raise ValueError(
                f"{op}: input '{name}' has rank {len(shape)} (shape {shape}); "
                f"the spec declares {shape_text(declared, batch)}"
            )
        lead = len(shape) - len(declared)
        if batch:
            if batch_dims is None:
                batch_dims, batch_source = shape[:lead], name
            elif shape[:lead] != batch_dims:
                raise ValueError(
                    f"{op}: input '{name}' has shape {shape}; its leading dimensions {shape[:lead]} "
                    f"(the spec's '...') must equal those of input '{batch_source}', {batch_dims}"
                )
        for axis, dim in enumerate(declared):
            size = shape[lead + axis]
            if isinstance(dim, int):
                if size != dim:
                    raise ValueError(
                        f"{op}: input '{name}' has shape {shape}; dimension {lead + axis} "
                        f"must be {dim}; the spec declares {shape_text(declared, batch)}"
                    )
            elif dim in values:
                if size != values[dim]:
                    by, by_axis = origin[dim]
                    raise ValueError(
                        f"{op}: input '{name}' has shape {shape}; dimension {lead + axis} "
                        f"must be {dim} = {values[dim]} (bound by input '{by}' dimension "
                        f"{by_axis}); the spec declares {shape_text(declared, batch)}"
                    )
            else:
                values[dim] = int(size)
                origin[dim] = (name, lead + axis)
    return values, (batch_dims if batch_dims is not None else ())


def nonnegative(op: str, output: str, expression: str, value: int) -> int:
    if value < 0:
        raise ValueError(f"{op}: output '{output}' has a dimension {expression} = {value} < 0")
    return value


def exact_division(op: str, output: str, declared: str, numerator: int, denominator: int) -> int:
    if denominator == 0 or numerator % denominator:
        raise ValueError(f"{op}: output '{output}' is declared {declared}, but {numerator} is not "
                         f"divisible by {denominator}")
    return numerator // denominator


_ATTR_KINDS = {"bool_": bool, "int32": int, "int64": int, "float32": float, "float64": float}


def check_attr(op: str, name: str, value, numpy_type: str, minimum=None, maximum=None):
    """An attribute as the exact numpy scalar type the handler binds.

    Attributes are compile-time constants of the custom call: a traced value
    is refused, and so is a value that does not fit the declared type.
    """
    kind = _ATTR_KINDS[numpy_type]
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"{op}: attribute '{name}' must be a Python {kind.__name__}, not a traced array")
    ok = isinstance(value, (bool, np.bool_)) if kind is bool else (
        isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
        if kind is int
        else isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    )
    if not ok:
        raise TypeError(f"{op}: attribute '{name}' must be a {kind.__name__}, not {type(value).__name__}")
    scalar_type = getattr(np, numpy_type)
    if kind is int:
        info = np.iinfo(scalar_type)
        if not info.min <= int(value) <= info.max:
            raise ValueError(f"{op}: attribute '{name}' = {value} does not fit {numpy_type}")
    if kind is float:
        if not np.isfinite(float(value)) or abs(float(value)) > float(np.finfo(scalar_type).max):
            raise ValueError(f"{op}: attribute '{name}' = {value} is not a finite {numpy_type}")
    check_range(op, f"attribute '{name}'", value, minimum, maximum)
    return scalar_type(value)


def check_api_version(op: str, api_version, available: Sequence[int]) -> int:
    if api_version not in available:
        raise ValueError(
            f"{op}: api_version {api_version!r} is not built for this op; its spec lists "
            f"{', '.join(str(v) for v in available)}"
        )
    return api_version
