// The 8-bit float formats dynamic_per_token_scaled_fp8_quant writes: their
// largest finite value, and (on the host) the conversion of a real to the
// nearest one, ties to even, saturated to the finite range as cuda_fp8.h's
// __NV_SATFINITE does, so that the CPU body is the CUDA body's reference.
#pragma once

#include <cmath>
#include <cstdint>

#include "opgen/dtypes.h"

namespace opgen_ops::dynamic_per_token_scaled_fp8_quant {

template <typename Q> struct Fp8;
// e4m3fn: no infinities, 0x7f is NaN, 448 the largest finite value.
template <> struct Fp8<opgen::f8e4m3fn> {
  static constexpr int kMantissa = 3, kBias = 7;
  static constexpr float kMax = 448.0f;
  static constexpr uint8_t kNaN = 0x7f;
};
// e5m2: IEEE-like (infinities and NaNs), 57344 the largest finite value.
template <> struct Fp8<opgen::f8e5m2> {
  static constexpr int kMantissa = 2, kBias = 15;
  static constexpr float kMax = 57344.0f;
  static constexpr uint8_t kNaN = 0x7f;
};

// The smallest scale a row gets (a row of zeros divides by it), as vLLM's
// min_scaling_factor: 1 / (max * 512).
template <typename Q, typename S>
OPGEN_HD constexpr S min_scale() {
  return S(1) / (static_cast<S>(Fp8<Q>::kMax) * S(512));
}

#if !defined(__CUDACC__)
// v as format Q: rounded to the nearest value (ties to even), saturated to
// +-max; NaN stays NaN.
template <typename Q>
uint8_t to_fp8(double v) {
  using F = Fp8<Q>;
  if (std::isnan(v)) return F::kNaN;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  double a = std::fabs(v);
  if (a >= F::kMax) a = F::kMax;
  // The spacing of the format around a: 2^(e - M) for a normal value of
  // exponent e, that of the smallest normal exponent below it (subnormals).
  const int min_exp = 1 - F::kBias;
  int e = a == 0.0 ? min_exp : std::ilogb(a);
  if (e < min_exp) e = min_exp;
  a = std::nearbyint(std::ldexp(a, F::kMantissa - e)) * std::ldexp(1.0, e - F::kMantissa);  // ties to even
  if (a > F::kMax) a = F::kMax;
  if (a == 0.0) return sign;
  int exp = std::ilogb(a);
  if (exp < min_exp) {  // subnormal: exponent field 0
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::ldexp(a, F::kMantissa - min_exp)));
  }
  const int mantissa = static_cast<int>(std::ldexp(a, F::kMantissa - exp)) - (1 << F::kMantissa);
  return static_cast<uint8_t>(sign | ((exp + F::kBias) << F::kMantissa) | mantissa);
}
#endif

}  // namespace opgen_ops::dynamic_per_token_scaled_fp8_quant
