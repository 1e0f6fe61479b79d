// CUDA body of fused_add_rms_norm: one block per row. The first pass adds x
// to the residual, stores the sum (rounded to T) and accumulates its squares
// in f32 (f64 for f64); after a block reduction the second pass reads the stored sum back
// (from L2: the block has just written it) and writes the normalised row into
// x. 16-byte vectors where the rows allow them.
#include <cstdint>

#include "opgen/block_reduce.h"
#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/fused_add_rms_norm.h"

namespace opgen_ops::fused_add_rms_norm {
namespace {

constexpr int kThreads = 256;

// V elements per access: 16 / sizeof(T) where every row start is 16-byte
// aligned and D a multiple of V, else 1.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads) add_and_normalize(Args<T> args) {
  using opgen::kernels::load_vec;
  using opgen::kernels::store_vec;
  using C = typename opgen::kernels::Compute<T>::type;
  __shared__ C partial[kThreads / 32];
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    T* x = args.x_out + row * args.x_strides[0];
    T* residual = args.residual_out + row * args.D;
    C squares = 0;
    for (int64_t i = threadIdx.x * int64_t{V}; i < args.D; i += kThreads * V) {
      C a[V], b[V];
      load_vec<V>(x + i, true, a);
      load_vec<V>(residual + i, true, b);
      T sum[V];
#pragma unroll
      for (int e = 0; e < V; ++e) opgen::kernels::store(sum, e, a[e] + b[e]);  // rounded to T, as stored
#pragma unroll
      for (int e = 0; e < V; ++e) {
        a[e] = opgen::kernels::load(sum, e);
        squares += a[e] * a[e];
      }
      store_vec<V>(residual + i, true, a);
    }
    squares = opgen::kernels::block_sum<kThreads>(squares, partial);
    const C rstd = C(1) / sqrt(squares / static_cast<C>(args.D) + C(args.eps));
    for (int64_t i = threadIdx.x * int64_t{V}; i < args.D; i += kThreads * V) {
      C r[V], w[V];
      load_vec<V>(residual + i, true, r);
      load_vec<V>(args.weight + i, true, w);
#pragma unroll
      for (int e = 0; e < V; ++e) r[e] = r[e] * rstd * w[e];
      store_vec<V>(x + i, true, r);
    }
  }
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  constexpr int kVector = 16 / sizeof(T);
  // CUDA grids hold at most 2^31 - 1 blocks in x; the kernel loops over the rest.
  const unsigned blocks = static_cast<unsigned>(args.batch < 0x7fffffff ? args.batch : 0x7fffffff);
  if (args.D % kVector == 0 && args.x_strides[0] % kVector == 0 && opgen::kernels::aligned16(args.x_out) &&
      opgen::kernels::aligned16(args.residual_out) && opgen::kernels::aligned16(args.weight)) {
    add_and_normalize<T, kVector><<<blocks, kThreads, 0, stream>>>(args);
  } else {
    add_and_normalize<T, 1><<<blocks, kThreads, 0, stream>>>(args);
  }
  return opgen::cuda_launch_status("add_and_normalize");
}

}  // namespace opgen_ops::fused_add_rms_norm
