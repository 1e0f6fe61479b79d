// CUDA body of glu: one thread per output element over a grid-stride loop.
#include <cstdint>

#include "glu_gate.h"
#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/glu.h"

namespace opgen_ops::glu {
namespace {

template <typename T>
__global__ void glu_elements(Args<T> args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  const int64_t half = args.D / 2;
  const int64_t n = args.batch * half;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = k / half, i = k % half;
    const T* x = args.x + row * args.D;
    store(args.out, k, load(x, i) * glu_gate::gate(args.activation, load(x, i + half)));
  }
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  constexpr int kThreads = 256;
  const int64_t n = args.batch * (args.D / 2);
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  glu_elements<T><<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("glu_elements");
}

}  // namespace opgen_ops::glu
