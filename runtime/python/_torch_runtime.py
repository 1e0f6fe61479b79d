"""Support shared by every generated PyTorch binding (hand-written, op-independent).

Loads the stable-ABI kernel library, checks arguments in the fake (meta)
kernels, and drives torch_xla: registration of the legacy custom-call targets
where the runtime supports it, and the plain answer where it does not.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping, Sequence

import torch

from ._shapes import product, shape_text  # noqa: F401  (product: the generated wrappers call _rt.product)

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBRARY_FILE = "_torch_ops.so"


def load_library() -> None:
    """Loads the kernels (their static initializers register the ops)."""
    path = os.path.join(_HERE, _LIBRARY_FILE)
    if not os.path.exists(path):
        raise ImportError(
            f"{path} is missing: the package was built without PyTorch. Rebuild it where torch "
            "is importable at build time (pip install --no-build-isolation .)"
        )
    torch.ops.load_library(path)


_DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
    "float64": torch.float64, "int32": torch.int32, "int64": torch.int64,
    "uint8": torch.uint8, "bool": torch.bool,
}


def dtype(name: str) -> torch.dtype:
    return _DTYPES[name]


def bind_dtypes(op: str, tensors, type_vars: Mapping[str, Sequence[str]]) -> dict:
    """The fake and XLA kernels' dtype checks: ``tensors`` holds ``(name,
    tensor, spec)``, spec a dtype name or a type variable of ``type_vars``.
    Returns the torch dtype of each type variable."""
    bound: dict = {}
    by: dict = {}
    for name, t, spec in tensors:
        got = str(t.dtype).removeprefix("torch.")
        if spec in type_vars:
            if spec in bound:
                if t.dtype != bound[spec]:
                    raise RuntimeError(
                        f"{op}: input '{name}' has dtype {got}, but its dtype {spec} is "
                        f"{str(bound[spec]).removeprefix('torch.')} (bound by input '{by[spec]}')"
                    )
            elif got not in type_vars[spec]:
                raise RuntimeError(f"{op}: input '{name}' has dtype {got}; {spec} must be one of "
                                   f"{', '.join(type_vars[spec])}")
            else:
                bound[spec], by[spec] = t.dtype, name
        elif t.dtype != _DTYPES[spec]:
            raise RuntimeError(f"{op}: input '{name}' has dtype {got}; the spec declares {spec}")
    return bound


def bind_shapes(op: str, inputs) -> tuple[dict, tuple]:
    """The fake and XLA kernels' shape checks: ``inputs`` holds ``(name,
    tensor, declared, batch)``. Sizes may be symbolic under torch.compile, so
    equalities go through torch._check. Returns the symbols and the batch
    dimensions ('...')."""
    values: dict = {}
    origin: dict = {}
    batch_dims = None
    batch_source = None
    first_name, first = inputs[0][0], inputs[0][1]
    for name, t, declared, batch in inputs:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: input '{name}' must be a torch.Tensor, not {type(t).__name__}")
        if t.device != first.device:
            # The C++ kernels refuse this too; here it would pick one device's kernel for all.
            raise RuntimeError(f"{op}: input '{name}' is on {t.device}, but input '{first_name}' is on "
                               f"{first.device}; every input must be on one device")
        if t.dim() != len(declared) and not (batch and t.dim() >= len(declared)):
            raise RuntimeError(
                f"{op}: input '{name}' has rank {t.dim()} (shape {tuple(t.shape)}); "
                f"the spec declares {shape_text(declared, batch)}"
            )
        lead = t.dim() - len(declared)
        if batch:
            if batch_dims is None:
                batch_dims, batch_source = tuple(t.shape[:lead]), name
            else:
                torch._check(
                    lead == len(batch_dims) and all(a == b for a, b in zip(t.shape[:lead], batch_dims)),
                    lambda: f"{op}: input '{name}' has shape {tuple(t.shape)}; its leading dimensions "
                    f"(the spec's '...') must equal those of input '{batch_source}', {batch_dims}",
                )
        for axis, dim in enumerate(declared):
            size = t.shape[lead + axis]
            if isinstance(dim, int):
                torch._check(size == dim, lambda: f"{op}: input '{name}' dimension {lead + axis} must be {dim}")
            elif dim in values:
                by, by_axis = origin[dim]
                torch._check(
                    size == values[dim],
                    lambda: f"{op}: input '{name}' has shape {tuple(t.shape)}; dimension {lead + axis} must be "
                    f"{dim} = {values[dim]} (bound by input '{by}' dimension {by_axis})",
                )
            else:
                values[dim] = size
                origin[dim] = (name, lead + axis)
    return values, (batch_dims if batch_dims is not None else ())


def exact_division(op: str, output: str, declared: str, numerator, denominator) -> None:
    torch._check(
        denominator != 0 and numerator % denominator == 0,
        lambda: f"{op}: output '{output}' is declared {declared}, but {numerator} is not divisible by {denominator}",
    )


def nonnegative(op: str, output: str, expression: str, value) -> None:
    torch._check(value >= 0, lambda: f"{op}: output '{output}' has a dimension {expression} = {value} < 0")


# --- torch_xla ----------------------------------------------------------------------------------

_xla_lock = threading.Lock()
_xla_registration: dict[str, str | None] = {}  # target -> None (registered) or why not
_graph_only = threading.local()


@contextlib.contextmanager
def xla_graph_only():
    """Lets ops on XLA tensors build their custom call even where its target
    cannot be registered (torch_xla 2.9, XLA:CPU), so the graph can be
    inspected or exported; executing that graph still fails."""
    previous = getattr(_graph_only, "on", False)
    _graph_only.on = True
    try:
        yield
    finally:
        _graph_only.on = previous


def _torch_xla_device_type() -> str:
    import torch_xla.runtime as xr

    return xr.device_type()


def register_xla_target(target: str, capsules: Mapping[str, Mapping[int, Mapping[str, object]]],
                        api_version: int) -> str | None:
    """Registers `target`'s CUDA legacy capsule with torch_xla once; returns
    None on success, else the reason it cannot run."""
    with _xla_lock:
        if target in _xla_registration:
            return _xla_registration[target]
        reason = None
        import torch_xla

        device = _torch_xla_device_type()
        capsule = capsules.get("cuda", {}).get(api_version, {}).get(target)
        if device != "CUDA":
            reason = (
                f"torch_xla runs on {device} here, and torch_xla registers custom-call targets only "
                f"for CUDA (XLA:CPU accepts none through it)"
            )
        elif capsule is None:
            reason = "the package was built without CUDA, so it has no GPU target to register"
        else:
            try:
                torch_xla._XLAC._xla_register_custom_call_target(target, capsule, "CUDA")
            except Exception as e:  # torch_xla 2.9 raises "not implemented": XLA:CUDA was removed
                reason = (
                    f"torch_xla {torch_xla.__version__} refused to register it "
                    f"({type(e).__name__}: {e}); torch_xla 2.5-2.8 with CUDA can run it"
                )
        _xla_registration[target] = reason
        return reason


def xla_custom_call(op: str, target: str, capsules, api_version: int, inputs: Sequence[torch.Tensor],
                    output_shapes: Sequence[Sequence[int]], output_dtypes: Sequence[torch.dtype],
                    opaque: bytes) -> list[torch.Tensor]:
    import torch_xla

    reason = register_xla_target(target, capsules, api_version)
    if reason is not None and not getattr(_graph_only, "on", False):
        raise RuntimeError(
            f"{op} cannot execute on XLA tensors here: {reason}. To build the graph anyway (to "
            f"inspect or export its HLO), call it inside opgen's xla_graph_only() context."
        )
    return torch_xla._XLAC._xla_custom_call(
        list(inputs), target, [list(s) for s in output_shapes], list(output_dtypes), False, opaque,
        api_version, {},
    )
