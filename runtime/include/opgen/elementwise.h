// Element loads and stores for kernel bodies: every op computes in
// float (double for f64) and stores in its storage type. Half and bfloat16
// conversions come from CUDA's headers in .cu files and from the compiler's
// _Float16 in host-only files.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "opgen/dtypes.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#else
#if !defined(__FLT16_MAX__)
#error "the CPU bodies need the compiler's _Float16 (GCC >= 12 or Clang >= 15 on x86-64 or AArch64)"
#endif
#endif

namespace opgen::kernels {

// The type a body computes in for storage type T.
template <typename T> struct Compute { using type = float; };
template <> struct Compute<double> { using type = double; };

// The type a body computes in for the elements a pointer type reaches
// (`ComputeOf<decltype(A::x)>`: that of an op's input x).
template <typename Pointer>
using ComputeOf = typename Compute<std::remove_const_t<std::remove_pointer_t<Pointer>>>::type;

template <typename T>
OPGEN_HD typename Compute<T>::type load(const T* p, int64_t i) { return static_cast<typename Compute<T>::type>(p[i]); }

template <typename T>
OPGEN_HD void store(T* p, int64_t i, typename Compute<T>::type v) { p[i] = static_cast<T>(v); }

// Whether p may be read and written in 16-byte vectors (load_vec, store_vec).
OPGEN_HD bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

#if defined(__CUDACC__)
template <> OPGEN_HD float load(const f16* p, int64_t i) { return __half2float(__ushort_as_half(p[i].bits)); }
template <> OPGEN_HD float load(const bf16* p, int64_t i) { return __bfloat162float(__ushort_as_bfloat16(p[i].bits)); }
template <> OPGEN_HD void store(f16* p, int64_t i, float v) { p[i].bits = __half_as_ushort(__float2half_rn(v)); }
template <> OPGEN_HD void store(bf16* p, int64_t i, float v) { p[i].bits = __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
// The 8-bit floats load (exactly: every value is a half); they store only
// through a body's own rounding (quant8.h), which chooses the saturation.
template <> OPGEN_HD float load(const f8e4m3fn* p, int64_t i) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(p[i].bits, __NV_E4M3)));
}
template <> OPGEN_HD float load(const f8e5m2* p, int64_t i) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(p[i].bits, __NV_E5M2)));
}

namespace detail {
template <int Bytes> struct Chunk;  // the widest load CUDA has for a run of Bytes
template <> struct Chunk<2> { using type = uint16_t; };
template <> struct Chunk<4> { using type = uint32_t; };
template <> struct Chunk<8> { using type = uint2; };
template <> struct Chunk<16> { using type = uint4; };
template <typename T, int V>
inline constexpr int kChunkBytes = V * int(sizeof(T)) < 16 ? V * int(sizeof(T)) : 16;
}  // namespace detail

// The V elements at p, in the compute type. Where `aligned` (p is a multiple
// of min(16, V * sizeof(T)) bytes) as vector loads of up to 16 bytes, which a
// memory-bound kernel needs to reach the bandwidth; element by element
// otherwise. `aligned` should be uniform across a warp.
template <int V, typename T>
__device__ __forceinline__ void load_vec(const T* p, bool aligned, typename Compute<T>::type (&out)[V]) {
  if (aligned) {
    constexpr int kChunk = detail::kChunkBytes<T, V>;
    using C = typename detail::Chunk<kChunk>::type;
    alignas(16) T tmp[V];
#pragma unroll
    for (int c = 0; c < V * int(sizeof(T)) / kChunk; ++c) reinterpret_cast<C*>(tmp)[c] = reinterpret_cast<const C*>(p)[c];
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = load(tmp, i);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = load(p, i);
  }
}

// Stores V elements at p, as load_vec reads them.
template <int V, typename T>
__device__ __forceinline__ void store_vec(T* p, bool aligned, const typename Compute<T>::type (&in)[V]) {
  if (aligned) {
    constexpr int kChunk = detail::kChunkBytes<T, V>;
    using C = typename detail::Chunk<kChunk>::type;
    alignas(16) T tmp[V];
#pragma unroll
    for (int i = 0; i < V; ++i) store(tmp, i, in[i]);
#pragma unroll
    for (int c = 0; c < V * int(sizeof(T)) / kChunk; ++c) reinterpret_cast<C*>(p)[c] = reinterpret_cast<const C*>(tmp)[c];
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) store(p, i, in[i]);
  }
}
#else
template <> inline float load(const f16* p, int64_t i) {
  _Float16 h;
  std::memcpy(&h, &p[i].bits, sizeof h);
  return static_cast<float>(h);
}
template <> inline void store(f16* p, int64_t i, float v) {
  const _Float16 h = static_cast<_Float16>(v);  // round to nearest even
  std::memcpy(&p[i].bits, &h, sizeof h);
}
template <> inline float load(const bf16* p, int64_t i) {
  const uint32_t bits = static_cast<uint32_t>(p[i].bits) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
namespace detail {
// An 8-bit float's value from its bits: M mantissa bits, exponent bias B, and
// whether the largest exponent holds infinities and NaNs (e5m2) or the finite
// values and one NaN, all ones (e4m3fn).
template <int M, int B, bool kIeee>
inline float fp8_value(uint8_t bits) {
  const int e = (bits >> M) & ((1 << (7 - M)) - 1), m = bits & ((1 << M) - 1);
  const float sign = bits & 0x80 ? -1.0f : 1.0f;
  const int top = (1 << (7 - M)) - 1;
  if (kIeee && e == top) return m ? std::numeric_limits<float>::quiet_NaN() : sign * std::numeric_limits<float>::infinity();
  if (!kIeee && e == top && m == (1 << M) - 1) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), 1 - B - M);  // subnormal
  return sign * std::ldexp(static_cast<float>(m + (1 << M)), e - B - M);
}
}  // namespace detail
// The 8-bit floats load (exactly); they store only through a body's own
// rounding (quant8.h), which chooses the saturation.
template <> inline float load(const f8e4m3fn* p, int64_t i) { return detail::fp8_value<3, 7, false>(p[i].bits); }
template <> inline float load(const f8e5m2* p, int64_t i) { return detail::fp8_value<2, 15, true>(p[i].bits); }
template <> inline void store(bf16* p, int64_t i, float v) {
  uint32_t x;
  std::memcpy(&x, &v, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a (quiet) NaN
    p[i].bits = static_cast<uint16_t>((x >> 16) | 0x40u);
  } else {  // round to nearest even
    p[i].bits = static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  }
}
#endif

}  // namespace opgen::kernels
