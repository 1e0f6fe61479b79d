// The 8-bit types the quant ops write (dynamic_per_token_scaled_fp8_quant,
// rms_norm_dynamic_per_token_quant): fp8 e4m3fn and e5m2, and int8. For each,
// the largest value a scale maps to (qmax), the smallest scale a row gets,
// a row's scale from its max |v|, and the conversion of a real to the nearest
// value (ties to even), saturated to the finite range: once for the CPU
// bodies and once for the CUDA bodies (cuda_fp8.h's __NV_SATFINITE, a
// round-to-nearest-even integer conversion), with the same results bit for
// bit, so that the CPU bodies are the CUDA bodies' references.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "opgen/dtypes.h"

#if defined(__CUDACC__)
#include <cuda_fp8.h>
#endif

namespace opgen_ops::quant8 {

template <typename Q> struct Format;
// e4m3fn: no infinities, 0x7f is NaN, 448 the largest finite value.
template <> struct Format<opgen::f8e4m3fn> {
  static constexpr int kMantissa = 3, kBias = 7;
  static constexpr float kMax = 448.0f;
  static constexpr uint8_t kNaN = 0x7f;
};
// e5m2: IEEE-like (infinities and NaNs), 57344 the largest finite value.
template <> struct Format<opgen::f8e5m2> {
  static constexpr int kMantissa = 2, kBias = 15;
  static constexpr float kMax = 57344.0f;
  static constexpr uint8_t kNaN = 0x7f;
};
// int8, symmetric as vLLM's: a row's max |v| maps to 127 (-128 is reached
// only by a value that saturates, under scale_ub).
template <> struct Format<int8_t> {
  static constexpr float kMax = 127.0f;
};

template <typename Q>
inline constexpr bool kIsInt = std::is_same_v<Q, int8_t>;

// The smallest scale a row gets (a row of zeros divides by it), as vLLM's
// min_scaling_factor: 1 / (qmax * 512) for the 8-bit floats, f32's epsilon
// for int8.
template <typename Q, typename S>
OPGEN_HD constexpr S min_scale() {
  if constexpr (kIsInt<Q>) {
    return static_cast<S>(FLT_EPSILON);
  } else {
    return S(1) / (static_cast<S>(Format<Q>::kMax) * S(512));
  }
}

// A row's scale from its max |v| (NaNs ignored, as fmax does), bounded by
// *scale_ub where the caller gives one: max(min(amax, ub) / qmax, min_scale).
template <typename Q, typename S>
OPGEN_HD S row_scale(S amax, const S* scale_ub) {
  using std::fmax;
  using std::fmin;
  if (scale_ub != nullptr) amax = fmin(amax, *scale_ub);
  return fmax(amax / static_cast<S>(Format<Q>::kMax), min_scale<Q, S>());
}

#if defined(__CUDACC__)
template <typename Q> constexpr __nv_fp8_interpretation_t kInterpretation = __NV_E4M3;
template <> constexpr __nv_fp8_interpretation_t kInterpretation<opgen::f8e5m2> = __NV_E5M2;

// v as Q: the nearest value, ties to even, saturated (NaN: NaN in fp8, 0 in
// int8, as the conversion instructions give).
template <typename Q, typename C>
__device__ __forceinline__ Q quantize(C v) {
  if constexpr (kIsInt<Q>) {
    int i;
    if constexpr (std::is_same_v<C, double>) {
      i = __double2int_rn(v);
    } else {
      i = __float2int_rn(v);
    }
    return static_cast<int8_t>(max(-128, min(127, i)));
  } else if constexpr (std::is_same_v<C, double>) {
    return Q{__nv_cvt_double_to_fp8(v, __NV_SATFINITE, kInterpretation<Q>)};
  } else {
    return Q{__nv_cvt_float_to_fp8(v, __NV_SATFINITE, kInterpretation<Q>)};
  }
}

// A row's scale with its reciprocal, correctly rounded (the one division a
// row makes): quotient() divides by the scale without a division per element.
struct Divisor {
  float scale, inverse;
  __device__ explicit Divisor(float s) : scale(s), inverse(1.0f / s) {}
};

// v / d.scale, correctly rounded, as the division gives it. q = v * inverse is
// within two ulps; q + (v - q * scale) * inverse (the residual exact in an
// FMA) makes it faithful, and a second such step rounds it correctly
// (Markstein's theorem: a faithful quotient and the correctly rounded
// reciprocal). Three FMAs and a product in place of the division's
// reciprocal approximation, its refinement and its range check, per element.
// The sign is v's, as the quotient's by a positive scale (the steps would turn
// -0 into +0). A non-finite product (v infinite or NaN, a quotient past f32)
// or scale (an infinite row) takes the division itself.
__device__ __forceinline__ float quotient(float v, const Divisor& d) {
  float q = v * d.inverse;
  if (!isfinite(q) || !isfinite(d.scale)) return v / d.scale;
  q = fmaf(fmaf(-q, d.scale, v), d.inverse, q);
  q = fmaf(fmaf(-q, d.scale, v), d.inverse, q);
  return copysignf(q, v);
}

// v as Q, by a row's scale, as quantized() below computes it (bit for bit).
template <typename Q>
__device__ __forceinline__ Q quantized(float v, const Divisor& d) {
  if constexpr (kIsInt<Q>) {
    return quantize<Q>(v * d.inverse);
  } else {
    return quantize<Q>(quotient(v, d));
  }
}

// Two values as Q (fp8), by a row's scale: one paired conversion.
template <typename Q>
__device__ __forceinline__ uint16_t quantized2(float a, float b, const Divisor& d) {
  return __nv_cvt_float2_to_fp8x2(make_float2(quotient(a, d), quotient(b, d)), __NV_SATFINITE, kInterpretation<Q>);
}

// V elements that move as one load or store.
template <typename E, int V>
struct alignas(sizeof(E) * V) Pack {
  E v[V];
};
#else
// v as format Q: rounded to the nearest value (ties to even), saturated to
// +-max; NaN stays NaN.
template <typename Q>
uint8_t to_fp8(double v) {
  using F = Format<Q>;
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

// v as Q: the nearest value, ties to even (nearbyint's default rounding
// mode), saturated; NaN: NaN in fp8, 0 in int8, as the CUDA conversions give.
template <typename Q>
Q quantize(double v) {
  if constexpr (kIsInt<Q>) {
    if (std::isnan(v)) return 0;
    return static_cast<int8_t>(std::nearbyint(std::fmin(std::fmax(v, -128.0), 127.0)));
  } else {
    return Q{to_fp8<Q>(v)};
  }
}
#endif

// v (a row's value) divided by the row's scale and converted to Q, as vLLM
// computes it: v / scale for the 8-bit floats, v * (1 / scale) for int8 (the
// reciprocal rounded to S first).
template <typename Q, typename S>
OPGEN_HD Q quantized(S v, S scale) {
  if constexpr (kIsInt<Q>) {
    return quantize<Q>(v * (S(1) / scale));
  } else {
    return quantize<Q>(v / scale);
  }
}

}  // namespace opgen_ops::quant8
