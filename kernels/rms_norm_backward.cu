// CUDA body of rms_norm_backward, in three passes:
//  1. rows (one block per row): sum x^2 and sum (g * w) * x in one read of
//     the row, then grad_x; the row's rstd goes to the workspace.
//  2. column slices (a block per 32 columns x slice of the rows): each
//     column's sums of grad_out * x * rstd and grad_out over its slice, the
//     rows spread over the block's 8 row lanes; into column_sums.
//  3. columns (a thread per column): the slices' sums, added in order, so
//     the result does not depend on scheduling (no atomics).
// Accumulation in f32 (f64 for f64). grad_out may have any strides (a
// broadcast gradient has stride 0).
#include <cstdint>

#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/rms_norm_backward.h"

namespace opgen_ops::rms_norm_backward {
namespace {

constexpr int kThreads = 256;
constexpr int kSlices = 64;  // column_sums' middle dimension (the spec's)
constexpr int kTileColumns = 32, kRowLanes = 8;

template <typename C>
__device__ C block_sum(C v, C* partial) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  C total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  __syncthreads();  // partial is reused by the next reduction
  return total;
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
    squares = block_sum(squares, partial);
    dot = block_sum(dot, partial);
    const C rstd = C(1) / sqrt(squares / C(d) + C(args.eps));
    const C mean_gn = dot * rstd / C(d);
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
      const C n = C(load(x, i)) * rstd;
      const C gw = load(g, i * gs) * (args.weight ? C(load(args.weight, i)) : C(1));
      opgen::kernels::store(args.grad_x + row * d, i, rstd * (gw - n * mean_gn));
    }
    if (threadIdx.x == 0) args.row_rstd[row] = rstd;
  }
}

// The rows of slice s: [s * batch / kSlices, (s + 1) * batch / kSlices).
__device__ int64_t slice_start(int64_t batch, int64_t s) {
  return batch / kSlices * s + batch % kSlices * s / kSlices;
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
    args.column_sums[s * args.D + i] = weight;
    args.column_sums[(kSlices + s) * args.D + i] = bias;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) column_pass(Args<T> args) {
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i >= args.D) return;
  double weight = 0, bias = 0;
  for (int s = 0; s < kSlices; ++s) {
    weight += args.column_sums[s * args.D + i];
    bias += args.column_sums[(kSlices + s) * args.D + i];
  }
  opgen::kernels::store(args.grad_weight, i, weight);
  opgen::kernels::store(args.grad_bias, i, bias);
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  // CUDA grids hold at most 2^31 - 1 blocks in x; the row pass loops over the rest.
  const unsigned rows = static_cast<unsigned>(args.batch < 0x7fffffff ? args.batch : 0x7fffffff);
  if (rows > 0) {
    row_pass<T><<<rows, kThreads, 0, stream>>>(args);
    if (opgen::Status s = opgen::cuda_launch_status("rms_norm_backward row_pass"); !s.ok()) return s;
  }
  const dim3 tiles(static_cast<unsigned>((args.D + kTileColumns - 1) / kTileColumns), kSlices);
  column_slice_pass<T><<<tiles, dim3(kTileColumns, kRowLanes), 0, stream>>>(args);
  if (opgen::Status s = opgen::cuda_launch_status("rms_norm_backward column_slice_pass"); !s.ok()) return s;
  const int64_t columns = (args.D + kThreads - 1) / kThreads;
  column_pass<T><<<static_cast<unsigned>(columns), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("rms_norm_backward column_pass");
}

}  // namespace opgen_ops::rms_norm_backward
