// Which instantiation of a one-block-a-row kernel to launch, for the bodies
// that hold a row in registers (layer_norm, the fp8 quant): the row is
// `vectors` 16-byte vectors, each thread keeps K of them, and the block is
// sized to the row so that no thread idles on a short one.
#pragma once

#include <cstdint>

namespace opgen::kernels {

// A kernel and the threads of each of its blocks.
template <typename Kernel>
struct RowLaunch {
  Kernel kernel = nullptr;  // nullptr: the row does not fit in registers
  int threads = 0;
};

// A row of at most 128 vectors gets a block of as many threads as it has
// vectors, rounded up to a warp (32, 64 or 128), one vector a thread; a
// longer one a block of kThreads threads with K = 1, 2, 4 or
// kMaxVectorsPerThread vectors each (K a template argument, so that a thread
// holds only the registers its rows need). `Family::template kernel<K,
// kBlock>()` names the instantiation for K vectors a thread and blocks of
// kBlock threads.
template <typename Family, int kThreads, int kMaxVectorsPerThread>
auto rows_in_registers(int64_t vectors) -> RowLaunch<decltype(Family::template kernel<1, 32>())> {
  static_assert(kThreads >= 128 && kThreads % 32 == 0 && kMaxVectorsPerThread > 4,
                "the ladder below steps through blocks of 32, 64, 128 and kThreads threads, then K = 2, 4");
  if (vectors <= 32) return {Family::template kernel<1, 32>(), 32};
  if (vectors <= 64) return {Family::template kernel<1, 64>(), 64};
  if (vectors <= 128) return {Family::template kernel<1, 128>(), 128};
  if (vectors <= kThreads) return {Family::template kernel<1, kThreads>(), kThreads};
  if (vectors <= 2 * kThreads) return {Family::template kernel<2, kThreads>(), kThreads};
  if (vectors <= 4 * kThreads) return {Family::template kernel<4, kThreads>(), kThreads};
  if (vectors <= int64_t{kMaxVectorsPerThread} * kThreads) {
    return {Family::template kernel<kMaxVectorsPerThread, kThreads>(), kThreads};
  }
  return {};
}

}  // namespace opgen::kernels
