// CUDA body of softmax_backward: one block per row. The block sums
// grad_out * out over the row (opgen/block_reduce.h) in f32 (f64 for f64), then
// writes grad_x = out * (grad_out - sum). grad_out may have any strides (a
// broadcast gradient has stride 0).
#include <cstdint>

#include "opgen/block_reduce.h"
#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/softmax_backward.h"

namespace opgen_ops::softmax_backward {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) softmax_backward_rows(Args<T> args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  using C = typename opgen::kernels::Compute<T>::type;  // float, double for f64
  __shared__ C partial[kThreads / 32];
  const int64_t gs = args.grad_out_strides[1];
  // Rows beyond the grid (more than 2^31 - 1 of them) come round again.
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    const T* g = args.grad_out + row * args.grad_out_strides[0];
    const T* out = args.out + row * args.D;
    T* dx = args.grad_x + row * args.D;
    C dot = 0;
    for (int64_t i = threadIdx.x; i < args.D; i += kThreads) dot += load(g, i * gs) * load(out, i);
    dot = opgen::kernels::block_sum<kThreads>(dot, partial);
    for (int64_t i = threadIdx.x; i < args.D; i += kThreads) store(dx, i, load(out, i) * (load(g, i * gs) - dot));
  }
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  // CUDA grids hold at most 2^31 - 1 blocks in x; the kernel loops over the rest.
  const int64_t blocks = args.batch < 0x7fffffff ? args.batch : 0x7fffffff;
  softmax_backward_rows<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("softmax_backward_rows");
}

}  // namespace opgen_ops::softmax_backward
