// The CUDA rotation of rotary_embedding and of its backward (the rotation by
// the opposite angles), over either op's Args (rotation.h says why they fit):
// one block per token; its threads rotate the (x, y) pairs of every query and
// key head, reading the token's cos and sin once into shared memory (the sines
// negated for the backward). Each thread rotates kV pairs at a time: NeoX
// style reads kV consecutive x and the kV y half a rotary dimension further,
// GPT-J style kV/2 neighbouring pairs, each run as one 16-byte load where the
// rows allow it (kV = 16 / sizeof(T)), element by element otherwise (kV = 1).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"

namespace opgen_ops::rotation {

// Rotates the first R dimensions of each of `heads` heads at `x`.
template <int kV, typename T, typename A>
__device__ void rotate_heads(T* x, int64_t heads, const typename opgen::kernels::Compute<T>::type* cos,
                             const typename opgen::kernels::Compute<T>::type* sin, const A& args) {
  using opgen::kernels::load_vec;
  using opgen::kernels::store_vec;
  using C = typename opgen::kernels::Compute<T>::type;
  const int64_t half = args.R / 2;
  const bool vectors = kV > 1;
  if (args.is_neox) {
    const int64_t units = half / kV;  // per head
    for (int64_t k = threadIdx.x; k < heads * units; k += blockDim.x) {
      T* head = x + (k / units) * args.head_size;
      const int64_t i = (k % units) * kV;
      C a[kV], b[kV];
      load_vec<kV>(head + i, vectors, a);
      load_vec<kV>(head + half + i, vectors, b);
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        const C c = cos[i + e], s = sin[i + e], xa = a[e];
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
      C a[kW];
      load_vec<kW>(head + j, vectors, a);
#pragma unroll
      for (int e = 0; e < kW; e += 2) {
        const C c = cos[(j + e) / 2], s = sin[(j + e) / 2], xa = a[e];
        a[e] = xa * c - a[e + 1] * s;
        a[e + 1] = a[e + 1] * c + xa * s;
      }
      store_vec<kW>(head + j, vectors, a);
    }
  }
}

template <int kV, typename A>
__global__ void rotate_tokens(A args, float sign) {
  using T = std::remove_pointer_t<decltype(args.query_out)>;
  using C = typename opgen::kernels::Compute<T>::type;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  C* angles = reinterpret_cast<C*>(shared_bytes);  // R/2 cosines, then R/2 sines (times sign)
  for (int64_t n = blockIdx.x; n < args.N; n += gridDim.x) {
    const int64_t p = args.positions[n];
    if (!args.positions_in_range(p)) continue;  // left as it is, as the specs say
    __syncthreads();  // the previous token's angles are no longer read
    for (int64_t i = threadIdx.x; i < args.R; i += blockDim.x) {
      angles[i] = opgen::kernels::load(args.cos_sin_cache + p * args.R, i) * C(i < args.R / 2 ? 1.0f : sign);
    }
    __syncthreads();
    const int64_t half = args.R / 2;
    rotate_heads<kV>(args.query_out + n * args.query_strides[0], args.QD / args.head_size, angles, angles + half, args);
    if (args.key_out) {
      rotate_heads<kV>(args.key_out + n * args.key_strides[0], args.KD / args.head_size, angles, angles + half, args);
    }
  }
}

// Enqueues the rotation of every token on `stream`; `op` names the op in errors.
template <typename A>
opgen::Status launch_rotation(cudaStream_t stream, const A& args, bool inverse, const char* op) {
  using T = std::remove_pointer_t<decltype(args.query_out)>;
  constexpr int kThreads = 128;
  constexpr int kVector = 16 / sizeof(T);
  const size_t shared = sizeof(typename opgen::kernels::Compute<T>::type) * static_cast<size_t>(args.R);
  if (shared > 48 * 1024) {
    return opgen::Status::InvalidArgument(std::string(op) + ": a rotary dimension R of " + std::to_string(args.R) +
                                          " needs more than 48 KiB of shared memory");
  }
  // 16-byte runs: every head and every run within it starts on a 16-byte
  // boundary, and the runs tile the rotated part.
  const int64_t run = args.is_neox ? args.R / 2 : args.R;
  const bool vectors = run % kVector == 0 && args.head_size % kVector == 0 && args.query_strides[0] % kVector == 0 &&
                       opgen::kernels::aligned16(args.query_out) &&
                       (!args.key_out || (args.key_strides[0] % kVector == 0 && opgen::kernels::aligned16(args.key_out)));
  const int64_t blocks = args.N < 65536 ? args.N : 65536;
  const float sign = inverse ? -1.0f : 1.0f;
  if (vectors) {
    rotate_tokens<kVector><<<static_cast<unsigned>(blocks), kThreads, shared, stream>>>(args, sign);
  } else {
    rotate_tokens<1><<<static_cast<unsigned>(blocks), kThreads, shared, stream>>>(args, sign);
  }
  return opgen::cuda_launch_status("rotate_tokens");
}

}  // namespace opgen_ops::rotation
