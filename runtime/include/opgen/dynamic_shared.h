// Lets a kernel use more than 48 KiB of dynamic shared memory, for kernel
// bodies (.cu files only):
//
//   if (opgen::Status s = opgen::allow_dynamic_shared<my_kernel<T>, kBytes>("my_kernel"); !s.ok()) return s;
//   my_kernel<T><<<grid, block, kBytes, stream>>>(...);
//
// cudaFuncSetAttribute holds for the current device's context; it costs
// microseconds, so it runs once per kernel and device, not on every launch.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "opgen/cuda_status.h"

namespace opgen {

template <auto kKernel, int kBytes>
Status allow_dynamic_shared(const char* kernel_name) {
  static std::atomic<uint64_t> done{0};  // bit d: set on device d (devices past 63 set it every time)
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return cuda_status(e, kernel_name);
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit)) return Status::Ok();
  if (cudaError_t e = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
      e != cudaSuccess) {
    return cuda_status(e, (std::string(kernel_name) + ": " + std::to_string(kBytes) + " bytes of shared memory").c_str());
  }
  done.fetch_or(bit, std::memory_order_release);
  return Status::Ok();
}

}  // namespace opgen
