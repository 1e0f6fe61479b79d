// CUDA body of flip: one thread per output element over a grid-stride loop.
// The axes are decided on the host (dims is host memory) and passed by value.
#include <cstdint>

#include "flip_axes.h"
#include "opgen/cuda_status.h"
#include "opgen_ops/flip.h"

namespace opgen_ops::flip {
namespace {

template <typename T>
__global__ void flip_elements(const T* x, T* out, int64_t n, int64_t rows, int64_t cols, Axes axes) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = k % cols, i = (k / cols) % rows, matrix = k - k % (rows * cols);
    out[k] = x[matrix + (axes.rows ? rows - 1 - i : i) * cols + (axes.cols ? cols - 1 - j : j)];
  }
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  const Axes axes = flipped_axes(args.dims);
  constexpr int kThreads = 256;
  const int64_t n = args.batch * args.M * args.N;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  flip_elements<T><<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(
      args.x, args.out, n, args.M, args.N, axes);
  return opgen::cuda_launch_status("flip_elements");
}

}  // namespace opgen_ops::flip
