// The bytes of memory of a device, for the bindings whose framework allocates
// the outputs (Source::memory): the binder refuses a buffer that would take
// more, before the allocator is asked, whose failure is torch's C++ stack
// trace on stderr beside the error. Each device is asked once per process
// (per library that includes this): every call of a PyTorch binding reads it.
#pragma once

#include <sys/sysinfo.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "opgen/binder.h"
#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace opgen {

// The CPU's: its RAM and swap, which bound what an allocation may take under
// Linux's default overcommit (RAM alone would refuse a call that runs today).
inline uint64_t cpu_memory() {
  static const uint64_t bytes = [] {
    struct sysinfo info {};
    if (sysinfo(&info) == 0) {
      return (static_cast<uint64_t>(info.totalram) + info.totalswap) * info.mem_unit;
    }
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : uint64_t{0};
  }();
  return bytes;
}

// CUDA device `index`'s total memory (its free memory changes, and torch's
// caching allocator reuses what it holds); 0 where it cannot be read, or in a
// build without CUDA.
inline uint64_t cuda_memory(int index) {
#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
  constexpr int kCached = 64;
  static std::atomic<uint64_t> cached[kCached] = {};
  const bool cacheable = index >= 0 && index < kCached;
  if (cacheable) {
    if (const uint64_t bytes = cached[index].load(std::memory_order_relaxed)) return bytes;
  }
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, index) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky; cleared so that no later check reports it
    return 0;
  }
  const uint64_t bytes = properties.totalGlobalMem;
  if (cacheable) cached[index].store(bytes, std::memory_order_relaxed);
  return bytes;
#else
  (void)index;
  return 0;
#endif
}

inline uint64_t device_memory(Device device, int index) {
  return device == Device::kCuda ? cuda_memory(index) : cpu_memory();
}

}  // namespace opgen
