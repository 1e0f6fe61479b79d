// A maximum over one thread block, for kernel bodies (.cu files only):
//
//   __shared__ float partial[kThreads / 32];
//   const float top = opgen::kernels::block_max<kThreads>(mine, partial);
//
// Every thread of the block (kThreads of them, a multiple of 32, all calling
// it) gets the maximum: a warp reduction by shuffles, then each thread takes
// the maximum of the warps' partial results in the same order, so all get the
// same bits. As fmax, it ignores a NaN unless every value is NaN. partial may
// be reused as soon as the call returns (block_sum's partial may be the same
// array).
#pragma once

#if defined(__CUDACC__)

namespace opgen::kernels {

template <int kThreads, typename C>
__device__ C block_max(C v, C* partial) {
  static_assert(kThreads % 32 == 0, "block_max needs whole warps");
  for (int offset = 16; offset > 0; offset /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  C top = partial[0];
  for (int w = 1; w < kThreads / 32; ++w) top = fmax(top, partial[w]);
  __syncthreads();  // every thread has read partial
  return top;
}

}  // namespace opgen::kernels

#endif  // __CUDACC__
