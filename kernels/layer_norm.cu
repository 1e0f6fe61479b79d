// CUDA body of layer_norm: one block per row. Where the row is dense, starts
// on 16 bytes and fits the block's registers (D <= 256 threads x 8 vectors of
// 16 bytes; a row of at most 128 vectors gets a block of as many threads as
// it has vectors, rounded up to a warp, so that none idles), each thread loads its part of the row once, in 16-byte vectors,
// and keeps it: the block sums it for the mean, then sums the squared
// deviations from the mean for the variance (two passes over registers, so no
// cancellation when the mean is large), then writes the normalised row: x is
// read once and out written once. Otherwise the row is read three times
// element by element (from L2 after the first). Statistics in f32 (f64 for f64).
#include <cstdint>
#include <type_traits>

#include "opgen/block_reduce.h"
#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen/row_blocks.h"
#include "opgen_ops/layer_norm.h"

namespace opgen_ops::layer_norm {
namespace {

constexpr int kThreads = 256;  // the most a block has
constexpr int kMaxVectorsPerThread = 8;

template <typename A>
using Compute = opgen::kernels::ComputeOf<decltype(A::x)>;

// The row's statistics, written by one thread where the caller asked for them.
template <typename A, typename C>
__device__ void store_statistics(const A& args, int64_t row, C mean, C rstd) {
  using S = std::remove_pointer_t<decltype(args.mean)>;
  if (threadIdx.x != 0) return;
  if (args.mean) args.mean[row] = static_cast<S>(mean);
  if (args.rstd) args.rstd[row] = static_cast<S>(rstd);
}

// V elements per vector, K vectors per thread, kBlock threads.
template <typename A, int V, int K, int kBlock>
__global__ void __launch_bounds__(kBlock) rows_in_registers(A args) {
  using opgen::kernels::load_vec;
  using C = Compute<A>;
  __shared__ C partial[kBlock / 32];
  const int64_t d = args.D;
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    C x[K][V];
    C sum = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t col = int64_t{threadIdx.x + k * kBlock} * V;
      if (col < d) {
        load_vec<V>(args.x + row * d + col, true, x[k]);
#pragma unroll
        for (int j = 0; j < V; ++j) sum += x[k][j];
      }
    }
    const C mean = opgen::kernels::block_sum<kBlock>(sum, partial) / C(d);
    C squares = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (int64_t{threadIdx.x + k * kBlock} * V >= d) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        x[k][j] -= mean;
        squares += x[k][j] * x[k][j];
      }
    }
    const C rstd = C(1) / sqrt(opgen::kernels::block_sum<kBlock>(squares, partial) / C(d) + C(args.eps));
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t col = int64_t{threadIdx.x + k * kBlock} * V;
      if (col >= d) continue;
      C w[V], b[V];
#pragma unroll
      for (int j = 0; j < V; ++j) w[j] = C(1), b[j] = C(0);
      if (args.weight) load_vec<V>(args.weight + col, true, w);
      if (args.bias) load_vec<V>(args.bias + col, true, b);
#pragma unroll
      for (int j = 0; j < V; ++j) x[k][j] = x[k][j] * rstd * w[j] + b[j];
      opgen::kernels::store_vec<V>(args.out + row * d + col, true, x[k]);
    }
    store_statistics(args, row, mean, rstd);
  }
}

template <typename A>
__global__ void __launch_bounds__(kThreads) rows_from_memory(A args) {
  using opgen::kernels::load;
  using C = Compute<A>;
  __shared__ C partial[kThreads / 32];
  const int64_t d = args.D;
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    const auto* x = args.x + row * d;
    C sum = 0;
    for (int64_t i = threadIdx.x; i < d; i += kThreads) sum += load(x, i);
    const C mean = opgen::kernels::block_sum<kThreads>(sum, partial) / C(d);
    C squares = 0;
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
      const C v = C(load(x, i)) - mean;
      squares += v * v;
    }
    const C rstd = C(1) / sqrt(opgen::kernels::block_sum<kThreads>(squares, partial) / C(d) + C(args.eps));
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
      const C scaled = (C(load(x, i)) - mean) * rstd * (args.weight ? C(load(args.weight, i)) : C(1));
      opgen::kernels::store(args.out + row * d, i, args.bias ? scaled + C(load(args.bias, i)) : scaled);
    }
    store_statistics(args, row, mean, rstd);
  }
}

template <typename A, int V>
struct InRegisters {
  template <int K, int kBlock>
  static auto kernel() { return rows_in_registers<A, V, K, kBlock>; }
};

// The kernel for args: in registers where the rows allow, else from memory.
template <typename A>
opgen::kernels::RowLaunch<void (*)(A)> kernel_for(const A& args) {
  using T = std::remove_const_t<std::remove_pointer_t<decltype(A::x)>>;
  constexpr int kVector = 16 / int(sizeof(T));
  using opgen::kernels::aligned16;
  const bool dense = args.D % kVector == 0 && aligned16(args.x) && aligned16(args.out) &&
                     (!args.weight || aligned16(args.weight)) && (!args.bias || aligned16(args.bias));
  if (dense) {
    const auto launch =
        opgen::kernels::rows_in_registers<InRegisters<A, kVector>, kThreads, kMaxVectorsPerThread>(args.D / kVector);
    if (launch.kernel) return launch;
  }
  return {rows_from_memory<A>, kThreads};
}

}  // namespace

template <typename T, typename S>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T, S>& args) {
  // CUDA grids hold at most 2^31 - 1 blocks in x; the kernels loop over the rest.
  const unsigned blocks = static_cast<unsigned>(args.batch < 0x7fffffff ? args.batch : 0x7fffffff);
  const auto launch = kernel_for(args);
  launch.kernel<<<blocks, launch.threads, 0, stream>>>(args);
  return opgen::cuda_launch_status("layer_norm");
}

}  // namespace opgen_ops::layer_norm
