// CUDA body of simple_add: out = a + alpha * b.
//
// Memory-bound. Each thread moves kUnroll 16-byte vectors (float4) per
// operand, issuing all loads before the first store so that several requests
// are in flight per thread; one block covers kThreads * kUnroll vectors and
// the grid covers the whole array (no grid-stride loop). The last N % 4
// elements, or an array whose pointers are not 16-byte aligned, go through a
// scalar kernel. The generated handler has already checked the shapes and
// skips the call when N == 0.
#include <cstdint>

#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/simple_add.h"

namespace opgen_ops::simple_add {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

__device__ __forceinline__ float4 axpy(float4 x, float4 y, float alpha) {
  return make_float4(x.x + alpha * y.x, x.y + alpha * y.y, x.z + alpha * y.z, x.w + alpha * y.w);
}

__global__ void __launch_bounds__(kThreads) add_vec4(const float4* __restrict__ a,
                                                     const float4* __restrict__ b,
                                                     float4* __restrict__ out, int64_t n4,
                                                     float alpha) {
  const int64_t base = int64_t{blockIdx.x} * (kThreads * kUnroll) + threadIdx.x;
  if (base + (kUnroll - 1) * kThreads < n4) {  // full tile: no per-element bounds checks
    float4 x[kUnroll], y[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      x[k] = a[base + k * kThreads];
      y[k] = b[base + k * kThreads];
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) out[base + k * kThreads] = axpy(x[k], y[k], alpha);
  } else {
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64_t i = base + k * kThreads;
      if (i < n4) out[i] = axpy(a[i], b[i], alpha);
    }
  }
}

__global__ void add_scalar(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ out, int64_t begin, int64_t n, float alpha) {
  for (int64_t i = begin + blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = a[i] + alpha * b[i];
  }
}

// CUDA's grid limit in x is 2^31 - 1 blocks; beyond it the scalar kernel's
// grid-stride loop takes the rest.
constexpr int64_t kMaxBlocks = (int64_t{1} << 31) - 1;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

opgen::Status launch_cuda(cudaStream_t stream, const Args& args) {
  int64_t done = 0;
  if (opgen::kernels::aligned16(args.a) && opgen::kernels::aligned16(args.b) && opgen::kernels::aligned16(args.out)) {
    const int64_t n4 = args.N / 4;
    const int64_t blocks = ceil_div(n4, kThreads * kUnroll);
    if (blocks > 0 && blocks <= kMaxBlocks) {
      add_vec4<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          reinterpret_cast<const float4*>(args.a), reinterpret_cast<const float4*>(args.b),
          reinterpret_cast<float4*>(args.out), n4, args.alpha);
      if (opgen::Status s = opgen::cuda_launch_status("simple_add add_vec4"); !s.ok()) return s;
      done = n4 * 4;
    }
  }
  if (done < args.N) {
    const int64_t blocks = ceil_div(args.N - done, kThreads);
    add_scalar<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(
        args.a, args.b, args.out, done, args.N, args.alpha);
    return opgen::cuda_launch_status("simple_add add_scalar");
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::simple_add
