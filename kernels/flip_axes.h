// Which of the last two axes flip reverses, from its `dims` attribute
// (shared by the CPU and CUDA bodies). The spec bounds each entry to
// [-2, -1]; listing an axis twice is refused here, as jnp.flip and
// torch.flip refuse it.
#pragma once

#include <string>

#include "opgen/status.h"
#include "opgen_ops/flip.h"

namespace opgen_ops::flip {

struct Axes {
  bool rows = false, cols = false;
};

inline opgen::Status flipped_axes(opgen::Span<const int64_t> dims, Axes* out) {
  for (int64_t d : dims) {
    bool& axis = d == -2 ? out->rows : out->cols;
    if (axis) return opgen::Status::InvalidArgument("flip: dims lists axis " + std::to_string(d) + " twice");
    axis = true;
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::flip
