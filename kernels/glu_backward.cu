// CUDA body of glu_backward: a thread per V consecutive pairs (a, b) of a row
// over a grid-stride loop, writing both halves of grad_x. Where every row
// starts on 16 bytes and grad_out's rows are dense, V fills 16 bytes and the
// loads and stores are 16-byte vectors (what reaches the memory bandwidth);
// otherwise V is 1 and grad_out may have any strides (a broadcast gradient
// has stride 0).
#include <cstdint>

#include "glu_gate.h"
#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/glu_backward.h"

namespace opgen_ops::glu_backward {
namespace {

template <typename T, int V>
__global__ void glu_backward_pairs(Args<T> args) {
  using C = typename opgen::kernels::Compute<T>::type;
  constexpr bool kVectors = V > 1;
  const int64_t per_row = args.H / V;  // V divides H where V > 1
  const int64_t n = args.batch * per_row;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = k / per_row, i = k % per_row * V;
    const T* x = args.x + row * args.D;
    const T* g = args.grad_out + row * args.grad_out_strides[0];
    C grad[V], a[V], b[V];
    if constexpr (kVectors) {
      opgen::kernels::load_vec<V>(g + i, true, grad);
    } else {
      grad[0] = opgen::kernels::load(g, i * args.grad_out_strides[1]);
    }
    opgen::kernels::load_vec<V>(x + i, kVectors, a);
    opgen::kernels::load_vec<V>(x + args.H + i, kVectors, b);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const C da = grad[j] * glu_gate::gate(args.activation, b[j]);
      b[j] = grad[j] * a[j] * glu_gate::gate_derivative(args.activation, b[j]);
      a[j] = da;
    }
    T* dx = args.grad_x + row * args.D;
    opgen::kernels::store_vec<V>(dx + i, kVectors, a);
    opgen::kernels::store_vec<V>(dx + args.H + i, kVectors, b);
  }
}

template <typename T, int V>
opgen::Status launch(cudaStream_t stream, const Args<T>& args) {
  constexpr int kThreads = 256;
  const int64_t n = args.batch * (args.H / V);
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  glu_backward_pairs<T, V><<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("glu_backward_pairs");
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  constexpr int kVector = 16 / int(sizeof(T));
  // Every row of x and grad_x (D = 2H elements) and of grad_out starts on 16 bytes.
  const bool vectors = args.H % kVector == 0 && args.grad_out_strides[1] == 1 &&
                       args.grad_out_strides[0] % kVector == 0 && opgen::kernels::aligned16(args.x) &&
                       opgen::kernels::aligned16(args.grad_x) && opgen::kernels::aligned16(args.grad_out);
  return vectors ? launch<T, kVector>(stream, args) : launch<T, 1>(stream, args);
}

}  // namespace opgen_ops::glu_backward
