// CUDA body of topk_softmax. A row (a token's expert logits) belongs to a
// group of kLanes threads of one warp, which reads it once, coalesced: for
// E <= 256 (the routers models use) into registers, kPerLane values a thread,
// and several rows share a warp where E <= 16. The group then finds the row's
// maximum and the sum of exp(x - max) with warp shuffles, and the top k by k
// rounds of a shuffle argmax, each over the elements that come after the last
// one chosen in the spec's order (larger first, the lower index among
// equals, NaN as -inf), so that nothing needs marking. One thread writes the
// row's k weights and indices. The read of the logits dominates; a wider row
// is read from memory in each pass instead (from L1 and L2 after the first).
#include <climits>
#include <cstdint>

#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/topk_softmax.h"

namespace opgen_ops::topk_softmax {
namespace {

constexpr int kThreads = 128;
constexpr unsigned kWarp = 0xffffffffu;  // every lane takes part in every shuffle

// Whether element (a_key, a) comes before (b_key, b) in the order of the choice.
__device__ __forceinline__ bool before(float a_key, int a, float b_key, int b) {
  return a_key > b_key || (a_key == b_key && a < b);
}

// Reductions over the kLanes threads of a group (aligned lanes of one warp).
template <int kLanes>
__device__ __forceinline__ float group_max(float v) {
  for (int o = kLanes / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kWarp, v, o, kLanes));
  return v;
}

template <int kLanes>
__device__ __forceinline__ float group_sum(float v) {
  for (int o = kLanes / 2; o > 0; o /= 2) v += __shfl_xor_sync(kWarp, v, o, kLanes);
  return v;
}

// The first element of the group's candidates, in the order of the choice.
template <int kLanes>
__device__ __forceinline__ void group_first(float& key, int& index) {
  for (int o = kLanes / 2; o > 0; o /= 2) {
    const float other_key = __shfl_xor_sync(kWarp, key, o, kLanes);
    const int other = __shfl_xor_sync(kWarp, index, o, kLanes);
    if (before(other_key, other, key, index)) {
      key = other_key;
      index = other;
    }
  }
}

// A row held in registers: element lane + j * kLanes in v[j]. A group past
// the last row holds an empty one (count 0), and still takes part in the shuffles.
template <typename T, int kLanes, int kPerLane>
struct RegisterRow {
  float v[kPerLane];
  int lane;
  int count;
  __device__ RegisterRow(const T* x, int lane, int count) : lane(lane), count(count) {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + j * kLanes;
      v[j] = e < count ? opgen::kernels::load(x, e) : 0.0f;
    }
  }
  template <typename F>
  __device__ void each(F f) const {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + j * kLanes;
      if (e < count) f(v[j], e);
    }
  }
};

// A row read from memory in each pass.
template <typename T, int kLanes>
struct MemoryRow {
  const T* x;
  int lane;
  int count;
  template <typename F>
  __device__ void each(F f) const {
    for (int e = lane; e < count; e += kLanes) f(opgen::kernels::load(x, e), e);
  }
};

// Routes one row: its softmax, then its top k, written by the thread with `write`.
template <int kLanes, typename Row>
__device__ void route(const Row& row, int64_t k, bool renormalize, bool write, float* weights, int32_t* indices) {
  float top = -INFINITY;
  row.each([&](float v, int) { top = fmaxf(top, v); });
  top = group_max<kLanes>(top);
  float sum = 0.0f;
  row.each([&](float v, int) { sum += expf(v - top); });
  sum = group_sum<kLanes>(sum);
  float last_key = INFINITY;  // before every element
  int last = -1;
  float chosen = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    float key = -INFINITY;  // after every element
    int index = INT_MAX;
    row.each([&](float v, int e) {
      const float ek = isnan(v) ? -INFINITY : v;
      if (before(last_key, last, ek, e) && before(ek, e, key, index)) {
        key = ek;
        index = e;
      }
    });
    group_first<kLanes>(key, index);
    last_key = key;
    last = index;
    const float w = expf(key - top) / sum;  // a NaN logit made the sum NaN, and so w
    chosen += w;
    if (write) {
      weights[j] = w;
      indices[j] = index;
    }
  }
  if (write && renormalize) {
    for (int64_t j = 0; j < k; ++j) weights[j] /= chosen;
  }
}

// One row per group of kLanes threads; rows beyond the grid come round again.
template <typename T, int kLanes, int kPerLane>
__global__ void __launch_bounds__(kThreads) topk_softmax_rows(Args<T> args) {
  constexpr int kGroups = kThreads / kLanes;
  const int lane = threadIdx.x % kLanes;
  const int group = threadIdx.x / kLanes;
  const int64_t k = args.topk;
  for (int64_t first = int64_t{blockIdx.x} * kGroups; first < args.N; first += int64_t{gridDim.x} * kGroups) {
    const int64_t r = first + group;
    const bool live = r < args.N;
    const T* x = args.gating_output + (live ? r : 0) * args.E;
    const int count = live ? static_cast<int>(args.E) : 0;
    float* weights = args.topk_weights + (live ? r : 0) * k;
    int32_t* indices = args.topk_indices + (live ? r : 0) * k;
    if constexpr (kPerLane > 0) {
      route<kLanes>(RegisterRow<T, kLanes, kPerLane>(x, lane, count), k, args.renormalize, live && lane == 0,
                    weights, indices);
    } else {
      route<kLanes>(MemoryRow<T, kLanes>{x, lane, count}, k, args.renormalize, live && lane == 0, weights,
                    indices);
    }
  }
}

template <typename T, int kLanes, int kPerLane>
opgen::Status launch(cudaStream_t stream, const Args<T>& args) {
  constexpr int64_t kGroups = kThreads / kLanes;
  const int64_t needed = (args.N + kGroups - 1) / kGroups;
  // CUDA grids hold at most 2^31 - 1 blocks in x; the kernel loops over the rest.
  const int64_t blocks = needed < 0x7fffffff ? needed : 0x7fffffff;
  topk_softmax_rows<T, kLanes, kPerLane><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("topk_softmax_rows");
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  // The narrowest group that holds the row in at most 8 registers a thread.
  if (args.E <= 8) return launch<T, 8, 1>(stream, args);
  if (args.E <= 16) return launch<T, 16, 1>(stream, args);
  if (args.E <= 32) return launch<T, 32, 1>(stream, args);
  if (args.E <= 64) return launch<T, 32, 2>(stream, args);
  if (args.E <= 128) return launch<T, 32, 4>(stream, args);
  if (args.E <= 256) return launch<T, 32, 8>(stream, args);
  return launch<T, 32, 0>(stream, args);  // kPerLane 0: from memory
}

}  // namespace opgen_ops::topk_softmax
