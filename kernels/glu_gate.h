// The gate of glu, shared by its CPU and CUDA bodies: act(b) for the
// spec's `activation` values.
#pragma once

#include <cmath>

#include "opgen/elementwise.h"
#include "opgen_ops/glu.h"

namespace opgen_ops::glu {

template <typename C>
OPGEN_HD C gate(Activation activation, C b) {
  using std::erf;
  using std::exp;
  switch (activation) {
    case Activation::gelu:
      return C(0.5) * b * (C(1) + erf(b * C(0.70710678118654752440)));
    case Activation::silu:
      return b / (C(1) + exp(-b));
    case Activation::sigmoid:
      break;
  }
  return C(1) / (C(1) + exp(-b));
}

}  // namespace opgen_ops::glu
