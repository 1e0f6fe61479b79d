// Asynchronous copies from global to shared memory for kernel bodies (.cu
// files only, sm_80 and newer), each one PTX instruction:
//
//   cp_async_16(dst, src, valid)   16 bytes global -> shared, zeros where !valid
//   cp_async_commit()              closes this thread's group of copies
//   cp_async_wait<N>()             waits until N of its groups at most are in flight
//
// A thread sees the bytes of its own copies once the wait returns; other
// threads see them after a barrier (__syncwarp or __syncthreads) that follows
// the wait. Copies in flight hold no registers, which lets a body keep more
// bytes on the way than its registers could.
#pragma once

#if defined(__CUDACC__)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "opgen/cp_async.h needs sm_80 or newer (cp.async); set CMAKE_CUDA_ARCHITECTURES to 80 or above"
#endif

#include <cstdint>

namespace opgen::kernels {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes from src to dst asynchronously, bypassing L1; where !valid
// nothing is read and dst gets zeros.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");  // no shared read moves above it
}

}  // namespace opgen::kernels

#endif  // __CUDACC__
