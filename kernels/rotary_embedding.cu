// CUDA body of rotary_embedding: one block per token; its threads rotate the
// (x, y) pairs of every query and key head, reading the token's cos and sin
// once into shared memory.
#include <cstdint>

#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/rotary_embedding.h"

namespace opgen_ops::rotary_embedding {
namespace {

template <typename T, typename I>
__device__ void rotate_pairs(T* x, int64_t heads, const float* cos, const float* sin, const Args<T, I>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  const int64_t half = args.R / 2;
  for (int64_t k = threadIdx.x; k < heads * half; k += blockDim.x) {
    const int64_t h = k / half, i = k % half;
    T* head = x + h * args.head_size;
    const int64_t xi = args.is_neox ? i : 2 * i, yi = args.is_neox ? half + i : 2 * i + 1;
    const float c = cos[i], s = sin[i], a = load(head, xi), b = load(head, yi);
    store(head, xi, a * c - b * s);
    store(head, yi, b * c + a * s);
  }
}

template <typename T, typename I>
__global__ void rotate_tokens(Args<T, I> args) {
  extern __shared__ float angles[];  // R/2 cosines, then R/2 sines
  for (int64_t n = blockIdx.x; n < args.N; n += gridDim.x) {
    const int64_t p = args.positions[n];
    if (!args.positions_in_range(p)) continue;  // left as it is, as the spec says
    __syncthreads();  // the previous token's angles are no longer read
    for (int64_t i = threadIdx.x; i < args.R; i += blockDim.x) {
      angles[i] = opgen::kernels::load(args.cos_sin_cache + p * args.R, i);
    }
    __syncthreads();
    const int64_t half = args.R / 2;
    rotate_pairs(args.query_out + n * args.query_strides[0], args.QD / args.head_size, angles, angles + half, args);
    if (args.key_out) {
      rotate_pairs(args.key_out + n * args.key_strides[0], args.KD / args.head_size, angles, angles + half, args);
    }
  }
}

}  // namespace

template <typename T, typename I>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T, I>& args) {
  constexpr int kThreads = 128;
  const size_t shared = sizeof(float) * static_cast<size_t>(args.R);
  if (shared > 48 * 1024) {
    return opgen::Status::InvalidArgument("rotary_embedding: a rotary dimension R of " + std::to_string(args.R) +
                                          " needs more than 48 KiB of shared memory");
  }
  const int64_t blocks = args.N < 65536 ? args.N : 65536;
  rotate_tokens<T, I><<<static_cast<unsigned>(blocks), kThreads, shared, stream>>>(args);
  return opgen::cuda_launch_status("rotate_tokens");
}

}  // namespace opgen_ops::rotary_embedding
