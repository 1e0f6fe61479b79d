// Element loads and stores for kernel bodies: every op computes in
// float (double for f64) and stores in its storage type. Half and bfloat16
// conversions come from CUDA's headers in .cu files and from the compiler's
// _Float16 in host-only files.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

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
