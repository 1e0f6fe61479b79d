// Sums and maxima over one thread block, for kernel bodies (.cu files only):
//
//   __shared__ float partial[kThreads / 32];
//   const float total = opgen::kernels::block_sum<kThreads>(mine, partial);
//   const float top = opgen::kernels::block_max<kThreads>(mine, partial);
//
// and several sums in one round of barriers (partial: N * kThreads / 32):
//
//   float sums[2] = {squares, dot};
//   opgen::kernels::block_sums<kThreads>(sums, partial);
//
// Every thread of the block (kThreads of them, a multiple of 32, all calling
// it) gets the result: a warp reduction by shuffles, then each thread combines
// the warps' partial results in the same order, so all get the same bits.
// The maximum is fmax's: it ignores a NaN unless every value is NaN. partial
// may be reused as soon as the call returns.
#pragma once

#if defined(__CUDACC__)

namespace opgen::kernels {

struct Plus {
  template <typename C>
  __device__ C operator()(C a, C b) const { return a + b; }
};

struct Max {
  template <typename C>
  __device__ C operator()(C a, C b) const { return fmax(a, b); }
};

// Reduces each of v[0..N) over the block with op, in place.
template <int kThreads, int N, typename C, typename Op>
__device__ void block_reduce(C (&v)[N], C* partial, Op op) {
  static_assert(kThreads % 32 == 0, "a block reduction needs whole warps");
  constexpr int kWarps = kThreads / 32;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    for (int offset = 16; offset > 0; offset /= 2) v[n] = op(v[n], __shfl_xor_sync(0xffffffffu, v[n], offset));
  }
  if (threadIdx.x % 32 == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) partial[n * kWarps + threadIdx.x / 32] = v[n];
  }
  __syncthreads();
#pragma unroll
  for (int n = 0; n < N; ++n) {
    v[n] = partial[n * kWarps];
    for (int w = 1; w < kWarps; ++w) v[n] = op(v[n], partial[n * kWarps + w]);
  }
  __syncthreads();  // every thread has read partial
}

template <int kThreads, int N, typename C>
__device__ void block_sums(C (&v)[N], C* partial) {
  block_reduce<kThreads>(v, partial, Plus{});
}

template <int kThreads, typename C>
__device__ C block_sum(C v, C* partial) {
  C one[1] = {v};
  block_reduce<kThreads>(one, partial, Plus{});
  return one[0];
}

template <int kThreads, typename C>
__device__ C block_max(C v, C* partial) {
  C one[1] = {v};
  block_reduce<kThreads>(one, partial, Max{});
  return one[0];
}

}  // namespace opgen::kernels

#endif  // __CUDACC__
