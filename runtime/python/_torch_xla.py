"""torch_xla: the generated ops on XLA tensors, as legacy custom calls (torch_xla
passes attributes only in the opaque backend_config), with the registration of
their CUDA targets where the runtime supports it and the plain answer where it
does not."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping

from . import _opaque, _spec
from ._thread_flag import ThreadFlag
from ._torch_values import torch_dtype


_xla_lock = threading.Lock()
_xla_registration: dict[str, str | None] = {}  # target -> None (registered) or why not
_graph_only = ThreadFlag()


def xla_graph_only() -> contextlib.AbstractContextManager[None]:
    """Lets ops on XLA tensors build their custom call even where its target
    cannot be registered (torch_xla 2.9, XLA:CPU), so the graph can be
    inspected or exported; executing that graph still fails."""
    return _graph_only.on()


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


def xla_custom_call(checked: _spec.Call, capsules) -> list:
    """The custom call of a checked call on XLA tensors, through the op's first
    legacy api_version (torch_xla passes attributes only in the opaque
    backend_config); every output, in spec order."""
    import torch_xla

    op = checked.op
    legacy = [v for v in op.api_versions if v != 4]
    if not legacy:
        raise NotImplementedError(
            f"{op.name}: torch_xla passes attributes only through a legacy custom call's opaque "
            "backend_config, and the spec lists no legacy api_version (1, 2 or 3)")
    api_version = legacy[0]
    target = op.legacy_target(api_version)
    reason = register_xla_target(target, capsules, api_version)
    if reason is not None and not _graph_only:
        raise RuntimeError(
            f"{op.name} cannot execute on XLA tensors here: {reason}. To build the graph anyway (to "
            f"inspect or export its HLO), call it inside opgen's xla_graph_only() context."
        )
    # The results: the outputs (less those left out with the optional input
    # they update, and those on request not asked for), then the workspaces
    # of the platform torch_xla runs on, dropped here.
    shapes = [s for s in checked.output_shapes if s is not None]
    dtypes = [d for d in checked.output_dtypes if d is not None]
    platform = "cuda" if torch_xla.runtime.device_type() in ("CUDA", "GPU") else "cpu"
    scratch = op.workspaces_on(platform)
    outs = list(torch_xla._XLAC._xla_custom_call(
        checked.operands, target, [list(s) for s in shapes] + [list(checked.workspace_shapes[i]) for i in scratch],
        [torch_dtype(d) for d in dtypes] + [torch_dtype(checked.workspace_dtypes[i]) for i in scratch], False,
        _opaque.encode(op, **_opaque.fields_of(checked)), api_version, {},
    )[:len(shapes)])
    return [outs.pop(0) if s is not None else None for s in checked.output_shapes]
