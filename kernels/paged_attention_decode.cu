// CUDA body of paged_attention_decode: flash-decoding. Each sequence's context
// is cut into partitions of kPartition tokens; one block per (sequence, kv
// head, partition) computes the logits of the partition for the group of
// query heads that share the kv head, their softmax, and the weighted sum of
// the values, so that the keys and values are read once per group. A sequence
// of one partition writes `out` directly; longer ones leave each partition's
// normalised output, largest logit and sum in the workspace, and a second
// kernel combines them.
//
// A warp reads kRows key or value rows per load (RowTiling: each lane 16
// bytes or more of a row, opgen::kernels::load_vec, vector loads where the
// caches are 16-byte aligned, which makes every row aligned since
// Dh*sizeof(T) is a multiple of 128), kUnroll loads in flight; the lanes of a
// row add their parts of a dot product with shuffles.
#include <cstdint>
#include <string>

#include <cuda_pipeline.h>

#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/paged_attention_decode.h"

namespace opgen_ops::paged_attention_decode {
namespace {

constexpr int kPartition = 256;  // tokens per partition: the 256 of the spec's workspace shapes
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

// How a warp reads rows of Dh elements: each lane loads kE consecutive
// elements (16 bytes or more), kL lanes cover a row, and a warp covers kRows
// rows per load instruction.
template <typename T, int Dh>
struct RowTiling {
  static constexpr int kVector = 16 / int(sizeof(T));
  static constexpr int kE = Dh / 32 > kVector ? Dh / 32 : kVector;
  static constexpr int kL = Dh / kE;
  static constexpr int kRows = 32 / kL;
};

// Sum over the kL lanes that share a row.
template <int kL>
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int offset = kL / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One block: sequence s, kv head kvh, query heads [h0, h0 + heads) of its
// group (heads <= kGroup), partition blockIdx.y.
template <typename T, int Dh, int kGroup>
__global__ void __launch_bounds__(kThreads, kGroup >= 8 ? 2 : 4) attend_partition(Args<T> args, int64_t chunks, bool aligned) {
  using Tiling = RowTiling<T, Dh>;
  constexpr int kE = Tiling::kE, kL = Tiling::kL, kRows = Tiling::kRows;
  // Rows each lane has in flight: fewer where the query heads and the sums
  // take many registers.
  constexpr int kUnroll = kGroup * kE >= 32 ? 2 : 4;
  // Sweeps whose copies are in flight: about 8 KiB of keys and values per warp.
  constexpr int kStageBytes = 2 * kUnroll * 32 * kE * int(sizeof(T));
  constexpr int kStages = 8192 / kStageBytes > 1 ? 8192 / kStageBytes : 1;
  constexpr int kSweep = kWarps * kRows * kUnroll;  // tokens the block reads per sweep
  const int64_t s = blockIdx.x / (args.KVH * chunks);
  const int64_t kvh = blockIdx.x / chunks % args.KVH, chunk = blockIdx.x % chunks;
  const int64_t group = args.H / args.KVH, h0 = kvh * group + chunk * kGroup;
  const int heads = static_cast<int>(group - chunk * kGroup < kGroup ? group - chunk * kGroup : kGroup);
  const int64_t partition = blockIdx.y, P = (args.MB * args.BS + kPartition - 1) / kPartition;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / kL, column = (lane % kL) * kE;  // the lane's row of the warp's kRows, its first element
  const int64_t context = args.context_lens[s];
  const bool context_ok = args.context_lens_in_range(context);
  const int64_t partitions = context_ok ? (context + kPartition - 1) / kPartition : 1;
  if (partition >= (partitions > 0 ? partitions : 1)) return;
  T* out = args.out + (s * args.H + h0) * Dh;
  if (!context_ok || context == 0) {  // NaN or zeros, as the spec says
    const float v = context_ok ? 0.f : __int_as_float(0x7fc00000);
    for (int i = threadIdx.x; i < heads * Dh; i += kThreads) opgen::kernels::store(out, i, v);
    return;
  }
  const int64_t t0 = partition * kPartition;
  const int n = static_cast<int>(context - t0 < kPartition ? context - t0 : kPartition);

  __shared__ float sums[kGroup][Dh];  // the weighted sum of the values
  __shared__ float head_max[kGroup], head_sum[kGroup], warp_max_of[kWarps][kGroup];
  __shared__ int block_ids[kPartition / 16];  // the partition's blocks (BS >= 16 divides kPartition)
  __shared__ int64_t offsets[kPartition];     // each token's element offset in the caches, for kv head kvh
  __shared__ int bad_block;
  if (threadIdx.x == 0) bad_block = 0;
  for (int i = threadIdx.x; i < kGroup * Dh; i += kThreads) (&sums[0][0])[i] = 0.f;
  if (threadIdx.x < kGroup) head_sum[threadIdx.x] = 0.f;
  __syncthreads();
  // The block ids, read and checked once: every row address below comes from
  // shared memory instead of a dependent global load.
  for (int j = threadIdx.x; j < (n + args.BS - 1) / args.BS; j += kThreads) {
    const int64_t id = args.block_tables[s * args.MB + t0 / args.BS + j];
    if (!args.block_tables_in_range(id)) bad_block = 1;
    block_ids[j] = static_cast<int>(id);
  }

  float q[kGroup][kE];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      q[g][e] = g < heads ? opgen::kernels::load(args.query + (s * args.H + h0 + g) * Dh, column + e) * args.scale : 0.f;
    }
  }
  __syncthreads();

  if (bad_block) {  // a block id outside the cache: NaN, as the spec says
    for (int i = threadIdx.x; i < heads * Dh; i += kThreads) opgen::kernels::store(out, i, __int_as_float(0x7fc00000));
    if (partitions > 1) {
      for (int g = threadIdx.x; g < heads; g += kThreads) {
        args.partial_max[((s * args.H + h0 + g) * P + partition)] = __int_as_float(0x7fc00000);
      }
    }
    return;
  }
  // Each token's row, once per block (a division by BS per token, not per
  // lane and load).
  for (int i = threadIdx.x; i < n; i += kThreads) {
    offsets[i] = ((int64_t{block_ids[i / args.BS]} * args.BS + i % args.BS) * args.KVH + kvh) * Dh;
  }
  __syncthreads();

  // The token of unrolled step u of a sweep starting at `base`, for this lane,
  // and this lane's part of its row in `cache`.
  const auto token = [&](int base, int u) { return base + (u * kWarps + warp) * kRows + sub; };
  const auto row = [&](const T* cache, int i) { return cache + offsets[i] + column; };

  // One pass over the partition with an online softmax: each lane keeps, for
  // the tokens of its row slot, the largest logit m, the sum l of exp(logit -
  // m) and the weighted sum of its columns of the values, rescaled when m
  // grows. The keys and values of kUnroll rows are loaded together, so twice
  // the bytes are in flight of a logits-then-values pass.
  float m[kGroup], l[kGroup], acc[kGroup][kE];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < kE; ++e) acc[g][e] = 0.f;
  }
  // Folds the keys and values of one sweep (k, v: this lane's columns of
  // kUnroll rows, zero past the context) into m, l and acc.
  const auto fold = [&](int base, const float (&k)[kUnroll][kE], const float (&v)[kUnroll][kE]) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      if (g >= heads) break;
      float logit[kUnroll], largest = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float dot = 0.f;
#pragma unroll
        for (int e = 0; e < kE; ++e) dot += q[g][e] * k[u][e];
        dot = row_sum<kL>(dot);  // every lane takes part: the shuffle needs the whole warp
        logit[u] = token(base, u) < n ? dot : -INFINITY;
        largest = fmaxf(largest, logit[u]);
      }
      if (largest == -INFINITY) continue;  // no token of this slot yet
      const float rescale = __expf(m[g] - largest);  // 0 while m is -inf
      m[g] = largest;
      l[g] *= rescale;
#pragma unroll
      for (int e = 0; e < kE; ++e) acc[g][e] *= rescale;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float p = __expf(logit[u] - largest);
        l[g] += p;
#pragma unroll
        for (int e = 0; e < kE; ++e) acc[g][e] += p * v[u][e];
      }
    }
  };
  if (aligned) {
    // kStages sweeps in flight: asynchronous copies (cp.async) of each lane's
    // 16-byte pieces into shared memory, which hold them without registers.
    // A lane reads back only the pieces it copied itself, so waiting for its
    // own copies is the only synchronisation.
    constexpr int kPieces = kE * int(sizeof(T)) / 16;  // 16-byte copies per lane and row
    __shared__ alignas(16) uint4 staged[kStages][kWarps][2][kUnroll][32 * kPieces];
    const int sweeps = (n + kSweep - 1) / kSweep;
    const auto issue = [&](int sweep) {
      if (sweep < sweeps) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int i = token(sweep * kSweep, u);
          if (i >= n) continue;
#pragma unroll
          for (int c = 0; c < kPieces; ++c) {
            __pipeline_memcpy_async(&staged[sweep % kStages][warp][0][u][lane * kPieces + c],
                                    reinterpret_cast<const uint4*>(row(args.key_cache, i)) + c, 16);
            __pipeline_memcpy_async(&staged[sweep % kStages][warp][1][u][lane * kPieces + c],
                                    reinterpret_cast<const uint4*>(row(args.value_cache, i)) + c, 16);
          }
        }
      }
      __pipeline_commit();  // an empty group past the last sweep keeps the count of groups regular
    };
#pragma unroll
    for (int sweep = 0; sweep < kStages - 1; ++sweep) issue(sweep);
    for (int sweep = 0; sweep < sweeps; ++sweep) {
      issue(sweep + kStages - 1);
      __pipeline_wait_prior(kStages - 1);
      float k[kUnroll][kE], v[kUnroll][kE];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (token(sweep * kSweep, u) < n) {
          const T* kp = reinterpret_cast<const T*>(&staged[sweep % kStages][warp][0][u][lane * kPieces]);
          const T* vp = reinterpret_cast<const T*>(&staged[sweep % kStages][warp][1][u][lane * kPieces]);
          opgen::kernels::load_vec<kE>(kp, true, k[u]);
          opgen::kernels::load_vec<kE>(vp, true, v[u]);
        } else {  // past the context: weight 0, and 0 * v must not be 0 * NaN
#pragma unroll
          for (int e = 0; e < kE; ++e) k[u][e] = v[u][e] = 0.f;
        }
      }
      fold(sweep * kSweep, k, v);
    }
  } else {  // caches not 16-byte aligned: element loads into registers
    for (int base = 0; base < n; base += kSweep) {
      float k[kUnroll][kE], v[kUnroll][kE];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = token(base, u);
#pragma unroll
        for (int e = 0; e < kE; ++e) k[u][e] = v[u][e] = 0.f;
        if (i < n) {
          opgen::kernels::load_vec<kE>(row(args.key_cache, i), false, k[u]);
          opgen::kernels::load_vec<kE>(row(args.value_cache, i), false, v[u]);
        }
      }
      fold(base, k, v);
    }
  }
  // Merge the row slots: first the kRows slots of a warp (lanes kL apart hold
  // the same columns), then the warps, through shared memory.
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    if (g >= heads) break;
#pragma unroll
    for (int offset = kL; offset < 32; offset *= 2) {
      const float other_m = __shfl_xor_sync(0xffffffffu, m[g], offset);
      const float other_l = __shfl_xor_sync(0xffffffffu, l[g], offset);
      const float largest = fmaxf(m[g], other_m);
      const float mine = largest == -INFINITY ? 0.f : __expf(m[g] - largest);
      const float theirs = largest == -INFINITY ? 0.f : __expf(other_m - largest);
      m[g] = largest;
      l[g] = l[g] * mine + other_l * theirs;
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        acc[g][e] = acc[g][e] * mine + __shfl_xor_sync(0xffffffffu, acc[g][e], offset) * theirs;
      }
    }
    if (lane == 0) warp_max_of[warp][g] = m[g];
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    if (g >= heads) break;
    float largest = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) largest = fmaxf(largest, warp_max_of[w][g]);
    const float scale = m[g] == -INFINITY ? 0.f : __expf(m[g] - largest);
    if (sub == 0) {
#pragma unroll
      for (int e = 0; e < kE; ++e) atomicAdd(&sums[g][column + e], acc[g][e] * scale);
      if (lane == 0) {
        atomicAdd(&head_sum[g], l[g] * scale);
        if (warp == 0) head_max[g] = largest;
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < heads * Dh; i += kThreads) {
    const int g = i / Dh, d = i % Dh;
    const float o = sums[g][d] / head_sum[g];
    if (partitions == 1) {
      opgen::kernels::store(out, i, o);
    } else {
      const int64_t slot = (s * args.H + h0 + g) * P + partition;
      args.partial_out[slot * Dh + d] = o;
      if (d == 0) {
        args.partial_max[slot] = head_max[g];
        args.partial_sum[slot] = head_sum[g];
      }
    }
  }
}

// One block per (sequence, head) of more than one partition: the partitions'
// outputs weighted by their share of the softmax's sum. A NaN largest logit
// (a partition that met a bad block id) makes the head NaN.
template <typename T, int Dh>
__global__ void __launch_bounds__(Dh) combine_partitions(Args<T> args) {
  const int64_t s = blockIdx.x / args.H, P = (args.MB * args.BS + kPartition - 1) / kPartition;
  const int64_t context = args.context_lens[s];
  if (!args.context_lens_in_range(context) || context <= kPartition) return;  // written by attend_partition
  const int64_t partitions = (context + kPartition - 1) / kPartition;
  const int64_t first = blockIdx.x * P;  // (s * H + h) * P
  float largest = -INFINITY;
  bool bad = false;
  for (int64_t p = 0; p < partitions; ++p) {
    const float m = args.partial_max[first + p];
    bad |= isnan(m);
    largest = fmaxf(largest, m);
  }
  float total = 0.f, o = 0.f;
  for (int64_t p = 0; p < partitions; ++p) {
    const float w = args.partial_sum[first + p] * __expf(args.partial_max[first + p] - largest);
    total += w;
    o += w * args.partial_out[(first + p) * Dh + threadIdx.x];
  }
  opgen::kernels::store(args.out + blockIdx.x * Dh, threadIdx.x, bad ? __int_as_float(0x7fc00000) : o / total);
}

template <typename T, int Dh, int kGroup>
opgen::Status launch(cudaStream_t stream, const Args<T>& args) {
  const int64_t group = args.H / args.KVH, chunks = (group + kGroup - 1) / kGroup;
  // At least one partition: a cache of no tokens still writes zeros or NaN.
  const int64_t P = (args.MB * args.BS + kPartition - 1) / kPartition > 0 ? (args.MB * args.BS + kPartition - 1) / kPartition : 1;
  const int64_t blocks = args.S * args.KVH * chunks;
  if (blocks > 0x7fffffff || P > 65535) {
    return opgen::Status::InvalidArgument("paged_attention_decode: " + std::to_string(args.S) + " sequences of up to " +
                                          std::to_string(args.MB * args.BS) + " tokens exceed the CUDA grid");
  }
  const bool aligned = (reinterpret_cast<uintptr_t>(args.key_cache) | reinterpret_cast<uintptr_t>(args.value_cache)) % 16 == 0;
  attend_partition<T, Dh, kGroup><<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(P)), kThreads, 0, stream>>>(
      args, chunks, aligned);
  if (opgen::Status st = opgen::cuda_launch_status("attend_partition"); !st.ok() || P == 1) return st;  // no sequence has two partitions
  if (args.S * args.H > 0x7fffffff) {
    return opgen::Status::InvalidArgument("paged_attention_decode: too many sequence heads for the CUDA grid");
  }
  combine_partitions<T, Dh><<<static_cast<unsigned>(args.S * args.H), Dh, 0, stream>>>(args);
  return opgen::cuda_launch_status("combine_partitions");
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  const int64_t group = args.H / args.KVH;
  return with_Dh(args.Dh, [&](auto dh) {
    constexpr int kDh = static_cast<int>(decltype(dh)::value);
    // Query heads per block: registers hold kGroup heads of the query and of
    // the sums, so a small group gets a small kGroup.
    if (group == 1) return launch<T, kDh, 1>(stream, args);
    if (group <= 4) return launch<T, kDh, 4>(stream, args);
    return launch<T, kDh, 8>(stream, args);
  });
}

}  // namespace opgen_ops::paged_attention_decode
