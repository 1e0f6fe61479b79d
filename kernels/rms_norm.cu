// CUDA body of rms_norm: one block per row. Each thread accumulates the
// squares of a strided slice in f32 (f64 for f64), the block reduces through shared memory,
// and a second pass scales and stores. Rows are read twice (they are small
// enough to stay in L2 for the widths LLMs use).
#include <cstdint>

#include "opgen/block_reduce.h"
#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/rms_norm.h"

namespace opgen_ops::rms_norm {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) rms_norm_rows(Args<T> args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  using C = typename opgen::kernels::Compute<T>::type;  // float, double for f64
  __shared__ C partial[kThreads / 32];
  // Rows beyond the grid (more than 2^31 - 1 of them) come round again.
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    const T* x = args.x + row * args.D;
    T* out = args.out + row * args.D;
    C sum = 0;
    for (int64_t i = threadIdx.x; i < args.D; i += kThreads) {
      const C v = load(x, i);
      sum += v * v;
    }
    sum = opgen::kernels::block_sum<kThreads>(sum, partial);
    const C rstd = C(1) / sqrt(sum / static_cast<C>(args.D) + static_cast<C>(args.eps));
    if (threadIdx.x == 0) args.rstd[row] = static_cast<float>(rstd);
    for (int64_t i = threadIdx.x; i < args.D; i += kThreads) {
      const C scaled = load(x, i) * rstd * (args.weight ? load(args.weight, i) : C(1));
      store(out, i, args.bias ? scaled + load(args.bias, i) : scaled);
    }
  }
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  // CUDA grids hold at most 2^31 - 1 blocks in x; the kernel loops over the rest.
  const int64_t blocks = args.batch < 0x7fffffff ? args.batch : 0x7fffffff;
  rms_norm_rows<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("rms_norm_rows");
}

}  // namespace opgen_ops::rms_norm
