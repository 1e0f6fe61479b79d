// A sum over one thread block, for kernel bodies (.cu files only):
//
//   __shared__ float partial[kThreads / 32];
//   const float total = opgen::kernels::block_sum<kThreads>(mine, partial);
//
// Every thread of the block (kThreads of them, a multiple of 32, all calling
// it) gets the total: a warp reduction by shuffles, then each thread adds the
// warps' partial sums in the same order, so all get the same bits. partial may
// be reused as soon as the call returns.
#pragma once

#if defined(__CUDACC__)

namespace opgen::kernels {

template <int kThreads, typename C>
__device__ C block_sum(C v, C* partial) {
  static_assert(kThreads % 32 == 0, "block_sum needs whole warps");
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  C total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  __syncthreads();  // every thread has read partial
  return total;
}

}  // namespace opgen::kernels

#endif  // __CUDACC__
