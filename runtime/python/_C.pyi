"""Type stubs of <package>._C, the extension module with the custom-call targets
(runtime/src/xla_module.cc)."""

from typing import Any

built_with_cuda: bool
opaque_layout_version: int

def targets() -> dict[str, dict[int, dict[str, Any]]]:
    """{platform: {api_version: {target_name: PyCapsule}}} for every custom-call target."""

def decode_opaque(op: str, blob: bytes) -> dict[str, int | float | bool | list[int]]:
    """Decodes a legacy opaque descriptor with the shims' own decoder (for tests)."""

def legacy_status_available() -> bool:
    """Whether legacy (api_version 2, 3) failures can reach XLA as a status in this process."""

def in_place_conflict(op: str, names: list[str], inputs: list[tuple[int, list[int], list[int], int] | None],
                      updated: int) -> str | None:
    """Why ``inputs[updated]`` cannot be updated in place by `op` (its elements overlap, or it shares memory with
    another input), or None. Each input is (address, sizes, strides in elements, element size), or None."""
