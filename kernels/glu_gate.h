// The gate of glu and its derivative, shared by the CPU and CUDA bodies of
// glu and glu_backward: act(b) and act'(b) for the spec's `activation`
// values (A: either op's Activation enum; both list sigmoid, gelu, silu).
#pragma once

#include <cmath>

#include "opgen/elementwise.h"

namespace opgen_ops::glu_gate {

template <typename A, typename C>
OPGEN_HD C gate(A activation, C b) {
  using std::erf;
  using std::exp;
  switch (activation) {
    case A::gelu:
      return C(0.5) * b * (C(1) + erf(b * C(0.70710678118654752440)));
    case A::silu:
      return b / (C(1) + exp(-b));
    case A::sigmoid:
      break;
  }
  return C(1) / (C(1) + exp(-b));
}

// d act(b) / db.
template <typename A, typename C>
OPGEN_HD C gate_derivative(A activation, C b) {
  using std::erf;
  using std::exp;
  const C s = C(1) / (C(1) + exp(-b));  // sigmoid(b)
  switch (activation) {
    case A::gelu:  // Phi(b) + b * phi(b)
      return C(0.5) * (C(1) + erf(b * C(0.70710678118654752440))) +
             b * exp(C(-0.5) * b * b) * C(0.39894228040143267794);
    case A::silu:  // s + b * s * (1 - s)
      return s * (C(1) + b * (C(1) - s));
    case A::sigmoid:
      break;
  }
  return s * (C(1) - s);
}

}  // namespace opgen_ops::glu_gate
