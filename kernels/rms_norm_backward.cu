// CUDA body of rms_norm_backward. A row pass (one block per row) reduces
// sum x^2 and sum (g * w) * x in one read of the row, writes grad_x and the
// row's rstd (into the workspace); a column pass (one thread per column)
// sums grad_out * x * rstd and grad_out over the rows, reading the rows
// coalesced across the threads. Accumulation in f32 (f64 for f64). grad_out
// may have any strides (a broadcast gradient has stride 0).
#include <cstdint>

#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/rms_norm_backward.h"

namespace opgen_ops::rms_norm_backward {
namespace {

constexpr int kThreads = 256;

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

template <typename T>
__global__ void __launch_bounds__(kThreads) column_pass(Args<T> args) {
  using opgen::kernels::load;
  using C = typename opgen::kernels::Compute<T>::type;
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i >= args.D) return;
  C weight = 0, bias = 0;
  for (int64_t row = 0; row < args.batch; ++row) {
    const C gi = load(args.grad_out + row * args.grad_out_strides[0], i * args.grad_out_strides[1]);
    weight += gi * C(load(args.x + row * args.D, i)) * C(args.row_rstd[row]);
    bias += gi;
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
  const int64_t columns = (args.D + kThreads - 1) / kThreads;
  column_pass<T><<<static_cast<unsigned>(columns), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("rms_norm_backward column_pass");
}

}  // namespace opgen_ops::rms_norm_backward
