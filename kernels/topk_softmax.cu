// CUDA body of topk_softmax. A row (a token's expert logits) belongs to a
// group of kLanes threads of one warp. For E <= 256 (the routers models use)
// the group reads it once into registers, kPerLane consecutive values a
// thread in 16-byte loads; with many rows, groups of 8 lanes (four rows a
// warp), otherwise the narrowest group that needs at most 8 values a thread.
// The group then finds the row's maximum and the sum of exp(x - max) with
// warp shuffles, and the top k by k rounds of a shuffle argmax, each over the
// elements that come after the last one chosen in the spec's order (larger
// first, the lower index among equals, NaN as -inf), so that nothing needs
// marking. One thread writes the row's k weights and indices. A wider row
// belongs to a whole warp and is read from memory in each pass (from L1 and
// L2 after the first).
#include <climits>
#include <cstdint>

#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/topk_softmax.h"

namespace opgen_ops::topk_softmax {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kManyRows = 16384;  // rows from which groups of 8 lanes route faster (launch_cuda)
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

// A row held in registers: elements lane * kPerLane + j in v[j], read in
// 16-byte loads where the row allows. A group past the last row holds an
// empty one (count 0), and still takes part in the shuffles.
template <typename T, int kLanes, int kPerLane>
struct RegisterRow {
  float v[kPerLane];
  int lane;
  int count;
  __device__ RegisterRow(const T* x, int lane, int count, bool aligned) : lane(lane), count(count) {
    const int first = lane * kPerLane;
    if (first + kPerLane <= count) {
      opgen::kernels::load_vec<kPerLane>(x + first, aligned, v);
    } else {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) v[j] = first + j < count ? opgen::kernels::load(x, first + j) : 0.0f;
    }
  }
  template <typename F>
  __device__ void each(F f) const {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane * kPerLane + j;
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
  // Every row starts on 16 bytes where the first does and rows are a multiple of 16 bytes long.
  const bool aligned = opgen::kernels::aligned16(args.gating_output) && args.E * int64_t{sizeof(T)} % 16 == 0;
  for (int64_t first = int64_t{blockIdx.x} * kGroups; first < args.N; first += int64_t{gridDim.x} * kGroups) {
    const int64_t r = first + group;
    const bool live = r < args.N;
    const T* x = args.gating_output + (live ? r : 0) * args.E;
    const int count = live ? static_cast<int>(args.E) : 0;
    float* weights = args.topk_weights + (live ? r : 0) * k;
    int32_t* indices = args.topk_indices + (live ? r : 0) * k;
    if constexpr (kPerLane > 0) {
      route<kLanes>(RegisterRow<T, kLanes, kPerLane>(x, lane, count, aligned), k, args.renormalize,
                    live && lane == 0, weights, indices);
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
  // Many rows (a prefill's tokens): groups of 8 lanes, four rows a warp, each
  // reduced in three rounds of shuffles. Fewer (a decode step's): the narrowest
  // group that holds the row in at most 8 registers a thread, so that each
  // row's chain of rounds is short (65536 x 64 bf16, top 8: 39 us against 73;
  // 4096 x 256: 13 us against 17 the other way round, on an H100).
  if (args.N >= kManyRows && args.E > 8 && args.E <= 256) {
    if (args.E <= 16) return launch<T, 8, 2>(stream, args);
    if (args.E <= 32) return launch<T, 8, 4>(stream, args);
    if (args.E <= 64) return launch<T, 8, 8>(stream, args);
    if (args.E <= 128) return launch<T, 8, 16>(stream, args);
    return launch<T, 8, 32>(stream, args);
  }
  if (args.E <= 8) return launch<T, 8, 1>(stream, args);
  if (args.E <= 16) return launch<T, 16, 1>(stream, args);
  if (args.E <= 32) return launch<T, 32, 1>(stream, args);
  if (args.E <= 64) return launch<T, 32, 2>(stream, args);
  if (args.E <= 128) return launch<T, 32, 4>(stream, args);
  if (args.E <= 256) return launch<T, 32, 8>(stream, args);
  return launch<T, 32, 0>(stream, args);  // kPerLane 0: from memory
}

}  // namespace opgen_ops::topk_softmax
