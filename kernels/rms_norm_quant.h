// The norm of rms_norm_dynamic_per_token_quant, shared by its CPU and CUDA
// bodies so that both compute it with the same operations in the same
// precision: the CUDA body's results are the CPU body's bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "opgen/elementwise.h"

namespace opgen_ops::rms_norm_quant {

// The row's 1 / sqrt(mean(s^2) + eps), from its sum of squares accumulated in
// double: exact enough that summing in another order (the CPU's, a block's)
// changes the f32 result only in the rarest of ties, where vLLM's f32 sum
// would differ from either by its own rounding.
OPGEN_HD float rstd_of(double squares, int64_t d, float eps) {
  using std::sqrt;
  return static_cast<float>(1.0 / sqrt(squares / static_cast<double>(d) + static_cast<double>(eps)));
}

// v rounded to T (f16, bf16; f32 as it is).
template <typename T>
OPGEN_HD float rounded(float v) {
  T t[1];
  opgen::kernels::store(t, 0, v);
  return opgen::kernels::load(t, 0);
}

// The normalised value of s (f32, the unrounded sum) as vLLM's kernel rounds
// it: T(T(s * rstd) * weight), each product in f32.
template <typename T>
OPGEN_HD float normalized(float s, float rstd, float weight) {
  return rounded<T>(rounded<T>(s * rstd) * weight);
}

}  // namespace opgen_ops::rms_norm_quant
