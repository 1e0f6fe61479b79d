# The oldest jaxlib and torch that the code opgen generates, and its runtime,
# are built against, stated once: OpgenToolchain.cmake refuses an older torch,
# `opgen --version` names both and `opgen init` writes them into a project's
# pyproject.toml (generator/CMakeLists.txt passes them to opgen). They are the
# versions tested: requirements-dev.txt pins them (the first stack of
# scripts/test.sh), and scripts/test_newest.sh builds against them and runs
# that package in the newest releases (it checks the pins against these).
include_guard(GLOBAL)

# The XLA FFI headers (xla/ffi/api/ffi.h) come from the jaxlib a package is
# built with; XLA keeps its FFI ABI backward compatible, so a package runs in
# that jaxlib and later ones. No older jaxlib is tested.
set(OPGEN_MIN_JAXLIB 0.10.2)
# The LibTorch stable ABI (STABLE_TORCH_LIBRARY, the aoti_torch C shim) as of
# torch 2.9, which later versions are meant to keep.
set(OPGEN_MIN_TORCH 2.9)
