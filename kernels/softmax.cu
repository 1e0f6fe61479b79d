// CUDA body of softmax: one block per row. The block finds the row's maximum
// (opgen/block_reduce.h), then the sum of exp(x - max), each
// thread over a strided slice in f32 (f64 for f64), and a third pass writes
// exp(x - max) / sum. Rows are read three times (they are small enough to stay
// in L2 for the widths models use). A row that is all -inf gives NaN, as
// torch.softmax does.
#include <cstdint>

#include "opgen/block_reduce.h"
#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/softmax.h"

namespace opgen_ops::softmax {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) softmax_rows(Args<T> args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  using C = typename opgen::kernels::Compute<T>::type;  // float, double for f64
  __shared__ C partial[kThreads / 32];
  // Rows beyond the grid (more than 2^31 - 1 of them) come round again.
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    const T* x = args.x + row * args.D;
    T* out = args.out + row * args.D;
    C top = -C(INFINITY);
    for (int64_t i = threadIdx.x; i < args.D; i += kThreads) top = fmax(top, load(x, i));
    top = opgen::kernels::block_max<kThreads>(top, partial);
    C sum = 0;
    for (int64_t i = threadIdx.x; i < args.D; i += kThreads) sum += exp(load(x, i) - top);
    sum = opgen::kernels::block_sum<kThreads>(sum, partial);
    for (int64_t i = threadIdx.x; i < args.D; i += kThreads) store(out, i, exp(load(x, i) - top) / sum);
  }
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  // CUDA grids hold at most 2^31 - 1 blocks in x; the kernel loops over the rest.
  const int64_t blocks = args.batch < 0x7fffffff ? args.batch : 0x7fffffff;
  softmax_rows<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("softmax_rows");
}

}  // namespace opgen_ops::softmax
