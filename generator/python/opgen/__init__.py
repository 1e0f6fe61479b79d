"""opgen, installed from its wheel: YAML specs of GPU ops in, the glue that runs their
hand-written kernel bodies from JAX and PyTorch out. The command is `opgen` (or
`python -m opgen`); `opgen --cmake-dir` prints where find_package(opgen) finds the CMake
package beside it, which scikit-build-core finds by itself through this package's
`cmake.prefix` entry point."""

import os

# The native opgen; templates, runtime and CMake package are under share/ and lib/ beside it.
EXECUTABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "opgen")
