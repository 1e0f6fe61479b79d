// Warp-level tensor-core primitives for kernel bodies (.cu files only, sm_80
// and newer), each one PTX instruction:
//
//   ldmatrix_x4(r, p), ldmatrix_x4_trans(r, p)   four 8x8 16-bit tiles from shared
//   movmatrix_trans(x)             one 8x8 16-bit tile transposed across the warp
//   mma_16x8x16<T>(c, a, b)        c (16x8 f32) += a (16x16 T) * b (16x8 T)
//   pack_pair<T>(lo, hi)           two floats rounded to T in one register
//   f16_pair_of_fp8<C>(x)          two 8-bit floats (x's low 16 bits) as two f16, exactly
//
// The fragment layouts are PTX's (the mma.m16n8k16 section of the PTX ISA):
// with g = lane / 4 and c = lane % 4, a thread holds rows g and g + 8 and
// columns 2c, 2c + 1 of a 16x8 accumulator; of a 16x16 A its rows g, g + 8
// and columns 2c, 2c + 1, 2c + 8, 2c + 9; of a 16x8 B its rows 2c, 2c + 1,
// 2c + 8, 2c + 9 and column g. T is opgen::f16 or opgen::bf16.
#pragma once

#if defined(__CUDACC__)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "opgen/warp_mma.h needs sm_80 or newer (mma.m16n8k16 with bf16); set CMAKE_CUDA_ARCHITECTURES to 80 or above"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "opgen/cp_async.h"  // shared_address
#include "opgen/dtypes.h"

namespace opgen::kernels {

// Lanes 8i..8i+7 give the addresses of the eight 16-byte rows of tile i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

template <typename T>
__device__ __forceinline__ void mma_16x8x16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);
template <>
__device__ __forceinline__ void mma_16x8x16<f16>(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void mma_16x8x16<bf16>(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// lo in the low half (the lower column or row index of a fragment pair).
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack_pair<f16>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack_pair<bf16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// The lower byte in the low half. Every e4m3fn and e5m2 value, NaN included,
// is an f16 value; from sm_89 on this is one cvt instruction.
template <typename C>
__device__ __forceinline__ uint32_t f16_pair_of_fp8(uint32_t x) {
  static_assert(std::is_same_v<C, f8e4m3fn> || std::is_same_v<C, f8e5m2>, "an 8-bit float type");
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(x & 0xffffu),
                                                   std::is_same_v<C, f8e4m3fn> ? __NV_E4M3 : __NV_E5M2);
  return uint32_t{h.x} | uint32_t{h.y} << 16;
}

}  // namespace opgen::kernels

#endif  // __CUDACC__
