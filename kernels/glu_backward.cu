// CUDA body of glu_backward: one thread per pair (a, b) of x over a
// grid-stride loop, writing both halves of grad_x.
#include <cstdint>

#include "glu_gate.h"
#include "opgen/cuda_status.h"
#include "opgen_ops/glu_backward.h"

namespace opgen_ops::glu_backward {
namespace {

template <typename T>
__global__ void glu_backward_elements(Args<T> args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  const int64_t n = args.batch * args.H;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = k / args.H, i = k % args.H;
    const T* x = args.x + row * args.D;
    T* dx = args.grad_x + row * args.D;
    const auto g = load(args.grad_out + row * args.grad_out_strides[0], i * args.grad_out_strides[1]);
    const auto a = load(x, i), b = load(x, i + args.H);
    store(dx, i, g * glu_gate::gate(args.activation, b));
    store(dx, i + args.H, g * a * glu_gate::gate_derivative(args.activation, b));
  }
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  constexpr int kThreads = 256;
  const int64_t n = args.batch * args.H;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  glu_backward_elements<T><<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("glu_backward_elements");
}

}  // namespace opgen_ops::glu_backward
