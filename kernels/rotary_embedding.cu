// CUDA body of rotary_embedding: one block per token; its threads rotate the
// (x, y) pairs of every query and key head, reading the token's cos and sin
// once into shared memory. Each thread rotates kV pairs at a time: NeoX style
// reads kV consecutive x and the kV y half a rotary dimension further, GPT-J
// style kV/2 neighbouring pairs, each run as one 16-byte load where the rows
// allow it (kV = 16 / sizeof(T)), element by element otherwise (kV = 1).
#include <cstdint>

#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/rotary_embedding.h"

namespace opgen_ops::rotary_embedding {
namespace {

// Rotates the first R dimensions of each of `heads` heads at `x`.
template <int kV, typename T, typename I>
__device__ void rotate_heads(T* x, int64_t heads, const float* cos, const float* sin, const Args<T, I>& args) {
  using opgen::kernels::load_vec;
  using opgen::kernels::store_vec;
  const int64_t half = args.R / 2;
  const bool vectors = kV > 1;
  if (args.is_neox) {
    const int64_t units = half / kV;  // per head
    for (int64_t k = threadIdx.x; k < heads * units; k += blockDim.x) {
      T* head = x + (k / units) * args.head_size;
      const int64_t i = (k % units) * kV;
      float a[kV], b[kV];
      load_vec<kV>(head + i, vectors, a);
      load_vec<kV>(head + half + i, vectors, b);
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        const float c = cos[i + e], s = sin[i + e], xa = a[e];
        a[e] = xa * c - b[e] * s;
        b[e] = b[e] * c + xa * s;
      }
      store_vec<kV>(head + i, vectors, a);
      store_vec<kV>(head + half + i, vectors, b);
    }
  } else {
    constexpr int kW = kV > 1 ? kV : 2;  // elements per step: whole pairs
    const int64_t units = args.R / kW;
    for (int64_t k = threadIdx.x; k < heads * units; k += blockDim.x) {
      T* head = x + (k / units) * args.head_size;
      const int64_t j = (k % units) * kW;  // first element; pair j / 2
      float a[kW];
      load_vec<kW>(head + j, vectors, a);
#pragma unroll
      for (int e = 0; e < kW; e += 2) {
        const float c = cos[(j + e) / 2], s = sin[(j + e) / 2], xa = a[e];
        a[e] = xa * c - a[e + 1] * s;
        a[e + 1] = a[e + 1] * c + xa * s;
      }
      store_vec<kW>(head + j, vectors, a);
    }
  }
}

template <int kV, typename T, typename I>
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
    rotate_heads<kV>(args.query_out + n * args.query_strides[0], args.QD / args.head_size, angles, angles + half, args);
    if (args.key_out) {
      rotate_heads<kV>(args.key_out + n * args.key_strides[0], args.KD / args.head_size, angles, angles + half, args);
    }
  }
}

}  // namespace

template <typename T, typename I>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T, I>& args) {
  constexpr int kThreads = 128;
  constexpr int kVector = 16 / sizeof(T);
  const size_t shared = sizeof(float) * static_cast<size_t>(args.R);
  if (shared > 48 * 1024) {
    return opgen::Status::InvalidArgument("rotary_embedding: a rotary dimension R of " + std::to_string(args.R) +
                                          " needs more than 48 KiB of shared memory");
  }
  // 16-byte runs: every head and every run within it starts on a 16-byte
  // boundary, and the runs tile the rotated part.
  const int64_t run = args.is_neox ? args.R / 2 : args.R;
  const bool vectors = run % kVector == 0 && args.head_size % kVector == 0 && args.query_strides[0] % kVector == 0 &&
                       opgen::kernels::aligned16(args.query_out) &&
                       (!args.key_out || (args.key_strides[0] % kVector == 0 && opgen::kernels::aligned16(args.key_out)));
  const int64_t blocks = args.N < 65536 ? args.N : 65536;
  if (vectors) {
    rotate_tokens<kVector, T, I><<<static_cast<unsigned>(blocks), kThreads, shared, stream>>>(args);
  } else {
    rotate_tokens<1, T, I><<<static_cast<unsigned>(blocks), kThreads, shared, stream>>>(args);
  }
  return opgen::cuda_launch_status("rotate_tokens");
}

}  // namespace opgen_ops::rotary_embedding
