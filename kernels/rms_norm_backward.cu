// CUDA body of rms_norm_backward. Where rows are dense, start on 16 bytes and
// fit one block's registers (D <= 256 threads x 4 vectors of 16 bytes), one
// pass reads each row once:
//  rows (a block per slice of the rows, 256 slices): per row, sum x^2 and
//  sum (g * w) * x, then grad_x (+ grad_residual); each thread keeps its columns' sums of
//  grad_out * n and grad_out over the slice in registers, written to
//  column_sums at the end.
// Otherwise (a broadcast or strided grad_out or grad_residual, an odd D, a
// wide row) it reads
// the rows twice:
//  rows (a block per row): the two sums, grad_x, and the row's rstd;
//  column slices (a block per 32 columns x slice): the sums of each column
//  over its slice, the rows spread over the block's 8 row lanes.
// Either way a last pass (a thread per column) adds the slices' sums in order,
// so the result does not depend on scheduling (no atomics). Accumulation in
// f32 (f64 for f64); column_sums holds sums of that type.
#include <cstdint>

#include "opgen/cuda_status.h"
#include "opgen/block_sum.h"
#include "opgen/elementwise.h"
#include "opgen_ops/rms_norm_backward.h"

namespace opgen_ops::rms_norm_backward {
namespace {

constexpr int kThreads = 256;
constexpr int kSlices = 256;  // column_sums' middle dimension (the spec's)
constexpr int kMaxVectorsPerThread = 4;
constexpr int kTileColumns = 32, kRowLanes = 8;

// The rows of slice s: [s * batch / kSlices, (s + 1) * batch / kSlices).
__device__ int64_t slice_start(int64_t batch, int64_t s) {
  return batch / kSlices * s + batch % kSlices * s / kSlices;
}

// column_sums as sums of the compute type C: [2][kSlices][D].
template <typename C, typename T>
__device__ C* column_sums(const Args<T>& args) {
  return reinterpret_cast<C*>(args.column_sums);
}

// One pass: V elements per vector, K vectors per thread.
template <typename T, int V, int K>
__global__ void __launch_bounds__(kThreads) fused_pass(Args<T> args) {
  using opgen::kernels::load_vec;
  using C = typename opgen::kernels::Compute<T>::type;
  __shared__ C partial[kThreads / 32];
  const int64_t d = args.D;
  C weight[K][V], weight_sum[K][V] = {}, bias_sum[K][V] = {};
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t col = (threadIdx.x + int64_t{k} * kThreads) * V;
#pragma unroll
    for (int j = 0; j < V; ++j) weight[k][j] = C(1);
    if (args.weight && col < d) load_vec<V>(args.weight + col, true, weight[k]);
  }
  const int64_t end = slice_start(args.batch, blockIdx.x + 1);
  for (int64_t row = slice_start(args.batch, blockIdx.x); row < end; ++row) {
    C x[K][V], g[K][V];
    C squares = 0, dot = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t col = (threadIdx.x + int64_t{k} * kThreads) * V;
      if (col < d) {
        load_vec<V>(args.x + row * d + col, true, x[k]);
        load_vec<V>(args.grad_out + row * args.grad_out_strides[0] + col, true, g[k]);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) x[k][j] = g[k][j] = C(0);
      }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        squares += x[k][j] * x[k][j];
        dot += g[k][j] * weight[k][j] * x[k][j];
      }
    }
    squares = opgen::kernels::block_sum<kThreads>(squares, partial);
    dot = opgen::kernels::block_sum<kThreads>(dot, partial);
    const C rstd = C(1) / sqrt(squares / C(d) + C(args.eps));
    const C mean_gn = dot * rstd / C(d);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t col = (threadIdx.x + int64_t{k} * kThreads) * V;
      if (col >= d) continue;
      C out[V], residual[V] = {};
      if (args.grad_residual) load_vec<V>(args.grad_residual + row * args.grad_residual_strides[0] + col, true, residual);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const C n = x[k][j] * rstd;
        out[j] = rstd * (g[k][j] * weight[k][j] - n * mean_gn) + residual[j];
        weight_sum[k][j] += g[k][j] * n;
        bias_sum[k][j] += g[k][j];
      }
      opgen::kernels::store_vec<V>(args.grad_x + row * d + col, true, out);
    }
  }
  C* sums = column_sums<C>(args);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t col = (threadIdx.x + int64_t{k} * kThreads) * V;
    if (col >= d) continue;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      sums[blockIdx.x * d + col + j] = weight_sum[k][j];
      sums[(kSlices + blockIdx.x) * d + col + j] = bias_sum[k][j];
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) row_pass(Args<T> args) {
  using opgen::kernels::load;
  using C = typename opgen::kernels::Compute<T>::type;
  __shared__ C partial[kThreads / 32];
  const int64_t d = args.D;
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    const T* x = args.x + row * d;
    const T* g = args.grad_out + row * args.grad_out_strides[0];
    const int64_t gs = args.grad_out_strides[1];
    C squares = 0, dot = 0;
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
      const C xi = load(x, i), gw = load(g, i * gs) * (args.weight ? C(load(args.weight, i)) : C(1));
      squares += xi * xi;
      dot += gw * xi;
    }
    squares = opgen::kernels::block_sum<kThreads>(squares, partial);
    dot = opgen::kernels::block_sum<kThreads>(dot, partial);
    const C rstd = C(1) / sqrt(squares / C(d) + C(args.eps));
    const C mean_gn = dot * rstd / C(d);
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
      const C n = C(load(x, i)) * rstd;
      const C gw = load(g, i * gs) * (args.weight ? C(load(args.weight, i)) : C(1));
      const C residual = args.grad_residual ? C(load(args.grad_residual, row * args.grad_residual_strides[0] +
                                                                             i * args.grad_residual_strides[1]))
                                            : C(0);
      opgen::kernels::store(args.grad_x + row * d, i, rstd * (gw - n * mean_gn) + residual);
    }
    if (threadIdx.x == 0) args.row_rstd[row] = rstd;
  }
}

template <typename T>
__global__ void __launch_bounds__(kTileColumns* kRowLanes) column_slice_pass(Args<T> args) {
  using opgen::kernels::load;
  using C = typename opgen::kernels::Compute<T>::type;
  __shared__ C weight_part[kRowLanes][kTileColumns], bias_part[kRowLanes][kTileColumns];
  const int64_t i = blockIdx.x * int64_t{kTileColumns} + threadIdx.x;
  const int64_t s = blockIdx.y;
  C weight = 0, bias = 0;
  if (i < args.D) {
    const int64_t end = slice_start(args.batch, s + 1);
    for (int64_t row = slice_start(args.batch, s) + threadIdx.y; row < end; row += kRowLanes) {
      const C gi = load(args.grad_out + row * args.grad_out_strides[0], i * args.grad_out_strides[1]);
      weight += gi * C(load(args.x + row * args.D, i)) * C(args.row_rstd[row]);
      bias += gi;
    }
  }
  weight_part[threadIdx.y][threadIdx.x] = weight;
  bias_part[threadIdx.y][threadIdx.x] = bias;
  __syncthreads();
  if (threadIdx.y == 0 && i < args.D) {
    for (int lane = 1; lane < kRowLanes; ++lane) {
      weight += weight_part[lane][threadIdx.x];
      bias += bias_part[lane][threadIdx.x];
    }
    C* sums = column_sums<C>(args);
    sums[s * args.D + i] = weight;
    sums[(kSlices + s) * args.D + i] = bias;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) column_pass(Args<T> args) {
  using C = typename opgen::kernels::Compute<T>::type;
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i >= args.D) return;
  const C* sums = column_sums<C>(args);
  C weight = 0, bias = 0;
  for (int s = 0; s < kSlices; ++s) {
    weight += sums[s * args.D + i];
    bias += sums[(kSlices + s) * args.D + i];
  }
  opgen::kernels::store(args.grad_weight, i, weight);
  opgen::kernels::store(args.grad_bias, i, bias);
}

template <typename T, int V, int K>
opgen::Status launch_fused(cudaStream_t stream, const Args<T>& args) {
  fused_pass<T, V, K><<<kSlices, kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("rms_norm_backward fused_pass");
}

// The one-pass kernel for args, or nullptr where it cannot run.
template <typename T>
opgen::Status (*fused_for(const Args<T>& args))(cudaStream_t, const Args<T>&) {
  constexpr int kVector = 16 / int(sizeof(T));
  using opgen::kernels::aligned16;
  const bool dense = args.D % kVector == 0 && args.grad_out_strides[1] == 1 &&
                     args.grad_out_strides[0] % kVector == 0 && aligned16(args.x) && aligned16(args.grad_out) &&
                     aligned16(args.grad_x) && (!args.weight || aligned16(args.weight)) &&
                     (!args.grad_residual || (args.grad_residual_strides[1] == 1 &&
                                              args.grad_residual_strides[0] % kVector == 0 &&
                                              aligned16(args.grad_residual)));
  const int64_t vectors = args.D / kVector;
  if (!dense || vectors > int64_t{kThreads} * kMaxVectorsPerThread) return nullptr;
  if (vectors <= kThreads) return launch_fused<T, kVector, 1>;
  if (vectors <= 2 * kThreads) return launch_fused<T, kVector, 2>;
  return launch_fused<T, kVector, kMaxVectorsPerThread>;
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  if (auto fused = fused_for(args)) {
    if (opgen::Status s = fused(stream, args); !s.ok()) return s;
  } else {
    // CUDA grids hold at most 2^31 - 1 blocks in x; the row pass loops over the rest.
    const unsigned rows = static_cast<unsigned>(args.batch < 0x7fffffff ? args.batch : 0x7fffffff);
    if (rows > 0) {
      row_pass<T><<<rows, kThreads, 0, stream>>>(args);
      if (opgen::Status s = opgen::cuda_launch_status("rms_norm_backward row_pass"); !s.ok()) return s;
    }
    const dim3 tiles(static_cast<unsigned>((args.D + kTileColumns - 1) / kTileColumns), kSlices);
    column_slice_pass<T><<<tiles, dim3(kTileColumns, kRowLanes), 0, stream>>>(args);
    if (opgen::Status s = opgen::cuda_launch_status("rms_norm_backward column_slice_pass"); !s.ok()) return s;
  }
  const int64_t columns = (args.D + kThreads - 1) / kThreads;
  column_pass<T><<<static_cast<unsigned>(columns), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("rms_norm_backward column_pass");
}

}  // namespace opgen_ops::rms_norm_backward
