# The oldest jaxlib and torch that the code opgen generates, and its runtime,
# are built against, stated once: OpgenToolchain.cmake refuses an older torch,
# `opgen --version` names both and `opgen init` writes them into a project's
# pyproject.toml (generator/CMakeLists.txt passes them to opgen).
include_guard(GLOBAL)

# The XLA FFI headers (xla/ffi/api/ffi.h) come from the jaxlib a package is
# built with; XLA keeps its FFI ABI backward compatible, so a package runs in
# that jaxlib and later ones.
set(OPGEN_MIN_JAXLIB 0.5)
# The LibTorch stable ABI (STABLE_TORCH_LIBRARY, the aoti_torch C shim) as of
# torch 2.9, which later versions are meant to keep.
set(OPGEN_MIN_TORCH 2.9)
