// Which of the last two axes flip reverses, from its `dims` attribute
// (shared by the CPU and CUDA bodies). The spec bounds each entry to
// [-2, -1] and makes them unique, and the bindings check both before a body
// runs, so every entry names one axis, once.
#pragma once

#include "opgen_ops/flip.h"

namespace opgen_ops::flip {

struct Axes {
  bool rows = false, cols = false;
};

inline Axes flipped_axes(opgen::Span<const int64_t> dims) {
  Axes axes;
  for (int64_t d : dims) (d == -2 ? axes.rows : axes.cols) = true;
  return axes;
}

}  // namespace opgen_ops::flip
