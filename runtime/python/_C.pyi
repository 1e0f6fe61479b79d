"""Type stubs of <package>._C, the extension module with the custom-call targets,
each op's rules over shapes alone and the eager PyTorch route
(runtime/src/xla_module.cc)."""

from collections.abc import Callable
from typing import Any

built_with_cuda: bool
opaque_layout_version: int

def targets() -> dict[str, dict[int, dict[str, Any]]]:
    """{platform: {api_version: {target_name: PyCapsule}}} for every custom-call target."""

def decode_opaque(op: str, blob: bytes) -> dict[str, int | float | bool | list[int]]:
    """Decodes a legacy opaque descriptor with the shims' own decoder (for tests)."""

def check(op: str, inputs: list[tuple[str, tuple[int, ...]] | None], attrs: list[Any], requested: int,
          framework: str, platform: str, sizes: bool = True
          ) -> tuple[dict[str, int], tuple[int, ...], dict[str, str], dict[str, tuple[tuple[int, ...] | None, str]],
                     tuple[tuple[tuple[int, ...], str], ...]]:
    """Checks a call given by shapes alone with the op's C++ rules (opgen/shape_source.h): each input as
    (dtype name, sizes[, strides]) or None, each attribute's value in spec order, the request mask, the framework
    ("jax", "torch") whose spelling the messages use, the platform ("cpu", "cuda") whose workspaces are checked;
    `sizes` False: the sizes are unknown (torch.compile's unbacked ones), and the dtype rules alone run. Returns
    what the rules made of the call: (symbols, batch dimensions, each type variable's dtype, {output: (shape, dtype)}
    for each output the rules name -- the shape None for one on request not asked for --, each workspace of the spec
    as (shape, dtype) whichever platform allocates it); with `sizes` False the dtypes alone (the rest empty). Raises
    TypeError (an input's dtype) or ValueError with the rules' message."""

def enum_unknown(op: str, attr: str, value: str, values: str) -> str:
    """The rules' message for an enum attribute's unknown value."""

def dtype_attr_refused(op: str, attr: str, got: str, allowed: str) -> str:
    """The rules' message for a dtype attribute's value outside its values."""

def legacy_status_available() -> bool:
    """Whether legacy (api_version 2, 3) failures can reach XLA as a status in this process."""

def in_place_conflict(op: str, names: list[str], inputs: list[tuple[int, list[int], list[int], int] | None],
                      updated: int) -> str | None:
    """Why ``inputs[updated]`` cannot be updated in place by `op` (its elements overlap, or it shares memory with
    another input), or None. Each input is (address, sizes, strides in elements, element size), or None."""

def torch_eager_api(api: Any, types: tuple[type, ...], unread: tuple[Callable[[Any], bool], ...]) -> str:
    """Takes torch.Tensor.__dlpack_c_exchange_api__ (torch >= 2.10), the tensor types (exactly) the eager route
    reads and the predicates of a tensor of those types it must not read (a negative-bit view, a named one), for
    the eager PyTorch route around the dispatcher (opgen/torch_eager.h): '' when it is in use, else why not (a
    build without it, an API of another DLPack major version)."""

def torch_eager_op(op: str) -> Any:
    """The op's eager route, a capsule for torch_eager."""

def torch_eager(op: Any, inputs: tuple[Any, ...], attrs: dict[str, Any], requested: int, grad_enabled: bool, /) -> Any:
    """A plain eager call of the op on torch.Tensor objects (in spec order, None for an omitted optional input),
    its attributes by name, the request mask and torch's grad mode: what the op's kernel returns (the outputs that
    alias no input: a tensor, a tuple of them, or None), or NotImplemented where nothing ran and the caller takes
    another route (a tensor of another type or needing a gradient, one DLPack cannot describe, a value the rules
    refuse)."""
