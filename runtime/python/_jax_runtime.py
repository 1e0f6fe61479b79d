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

_JAX_PLATFORM = {"cpu": "cpu", "cuda": "CUDA"}


def register_targets(targets: Mapping[str, Mapping[int, Mapping[str, object]]]) -> None:
    """Registers every capsule of ``_C.targets()`` with JAX.

    api_version 4 handlers are typed-FFI targets (JAX's ``api_version=1``);
    legacy shims are registered with JAX's ``api_version=0``.
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


def _declared(shape: Sequence[int | str]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def check_input(op: str, name: str, x, dtype: str, declared: Sequence[int | str]):
    """Returns ``x`` as an array after checking its dtype and rank. Never casts."""
    if not (hasattr(x, "dtype") and hasattr(x, "shape")):
        x = np.asarray(x)
    want = jnp.dtype(dtype)
    if x.dtype != want:
        raise TypeError(
            f"{op}: input '{name}' has dtype {x.dtype}; the spec declares {want.name} "
            f"(convert it explicitly, e.g. x.astype(jnp.{want.name}))"
        )
    if len(x.shape) != len(declared):
        raise ValueError(
            f"{op}: input '{name}' has rank {len(x.shape)} (shape {tuple(x.shape)}); "
            f"the spec declares {_declared(declared)}"
        )
    return x


def bind_symbols(op: str, inputs: Sequence[tuple[str, Sequence[int], Sequence[int | str]]]) -> dict:
    """Binds each shape symbol to its first input dimension; checks the rest."""
    values: dict[str, int] = {}
    origin: dict[str, tuple[str, int]] = {}
    for name, shape, declared in inputs:
        for axis, (size, dim) in enumerate(zip(shape, declared)):
            if isinstance(dim, int):
                if size != dim:
                    raise ValueError(
                        f"{op}: input '{name}' has shape {tuple(shape)}; dimension {axis} "
                        f"must be {dim}; the spec declares {_declared(declared)}"
                    )
            elif dim in values:
                if size != values[dim]:
                    by, by_axis = origin[dim]
                    raise ValueError(
                        f"{op}: input '{name}' has shape {tuple(shape)}; dimension {axis} "
                        f"must be {dim} = {values[dim]} (bound by input '{by}' dimension "
                        f"{by_axis}); the spec declares {_declared(declared)}"
                    )
            else:
                values[dim] = int(size)
                origin[dim] = (name, axis)
    return values


_ATTR_KINDS = {"bool_": bool, "int32": int, "int64": int, "float32": float, "float64": float}


def check_attr(op: str, name: str, value, numpy_type: str):
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
    return scalar_type(value)


def check_api_version(op: str, api_version, available: Sequence[int]) -> int:
    if api_version not in available:
        raise ValueError(
            f"{op}: api_version {api_version!r} is not built for this op; its spec lists "
            f"{', '.join(str(v) for v in available)}"
        )
    return api_version
