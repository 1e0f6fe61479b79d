// Element loads and stores for kernel bodies: every op computes in
// float (double for f64) and stores in its storage type. Half and bfloat16
// conversions come from CUDA's headers in .cu files and from the compiler's
// _Float16 in host-only files.
#pragma once

#include <cstdint>
#include <cstring>

#include "opgen/dtypes.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#else
#if !defined(__FLT16_MAX__)
#error "the CPU bodies need the compiler's _Float16 (GCC >= 12 or Clang >= 15 on x86-64 or AArch64)"
#endif
#endif

namespace opgen::kernels {

// The type a body computes in for storage type T.
template <typename T> struct Compute { using type = float; };
template <> struct Compute<double> { using type = double; };

template <typename T>
OPGEN_HD typename Compute<T>::type load(const T* p, int64_t i) { return static_cast<typename Compute<T>::type>(p[i]); }

template <typename T>
OPGEN_HD void store(T* p, int64_t i, typename Compute<T>::type v) { p[i] = static_cast<T>(v); }

#if defined(__CUDACC__)
template <> OPGEN_HD float load(const f16* p, int64_t i) { return __half2float(__ushort_as_half(p[i].bits)); }
template <> OPGEN_HD float load(const bf16* p, int64_t i) { return __bfloat162float(__ushort_as_bfloat16(p[i].bits)); }
template <> OPGEN_HD void store(f16* p, int64_t i, float v) { p[i].bits = __half_as_ushort(__float2half_rn(v)); }
template <> OPGEN_HD void store(bf16* p, int64_t i, float v) { p[i].bits = __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
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
