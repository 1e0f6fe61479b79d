// CUDA body of paged_attention_decode: flash-decoding. Each sequence's context
// is cut into partitions; one block per (sequence, kv head, chunk of the query
// heads that share it, partition) computes the partition's logits for those
// heads, their softmax and the weighted sum of the values, so that the keys and
// values are read once per chunk. A sequence of one partition writes `out`
// directly; longer ones leave each partition's normalised output, largest
// logit and sum in the workspace, and a second kernel combines them.
//
// Two kernels compute a partition:
// - attend_partition_mma, for f16 and bf16 queries over caches of their own
//   type or fp8 ones, at 16-byte aligned addresses (what vLLM and XLA
//   allocate): tiles of 16 tokens are copied into shared memory
//   asynchronously (cp.async, a ring of stages per warp) and multiplied on
//   the tensor cores, up to 8 query heads at a time (mma.m16n8k16 with the
//   tokens as M and the heads as N), so that a token costs a few
//   instructions and the kernel streams at memory speed. An fp8 tile is
//   converted to f16 in registers (MmaTile says how).
// - attend_partition, for f32 queries and unaligned caches: CUDA cores, a
//   warp reading kRows rows per load (RowTiling: each lane 16 bytes or more of
//   a row), the lanes of a row adding their parts of a dot product with
//   shuffles. An fp8 element converts to f32 exactly.
// The caches' scales (k_scale, v_scale) fold into the logits' factor and
// into each head's result: no work per element.
#include <cstdint>
#include <string>
#include <type_traits>

#include "opgen/cuda_status.h"
#include "opgen/dynamic_shared.h"
#include "opgen/elementwise.h"
#include "opgen/cp_async.h"
#include "opgen/warp_mma.h"
#include "opgen_ops/paged_attention_decode.h"

namespace opgen_ops::paged_attention_decode {
namespace {

// Tokens per partition, the shortest: the spec's workspaces hold one partition
// per 256 tokens of the longest context (launch checks that they agree).
constexpr int kPartition = 256;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
__device__ __forceinline__ float nan_value() { return __int_as_float(0x7fc00000); }

// The caches hold K / k_scale and V / v_scale (reshape_and_cache's): the
// logits' factor k_scale joins `scale`, and v_scale multiplies each head's
// weighted sum. 1 where the call gives none.
template <typename T, typename C>
__device__ __forceinline__ float key_scale(const Args<T, C>& args) { return args.k_scale ? *args.k_scale : 1.f; }
template <typename T, typename C>
__device__ __forceinline__ float value_scale(const Args<T, C>& args) { return args.v_scale ? *args.v_scale : 1.f; }

// Partitions per head in the workspace (its third dimension, as the spec
// sizes it), at least one: a cache of no tokens still has a partition that
// writes zeros or NaN.
template <typename T, typename C>
__host__ __device__ int64_t workspace_partitions(const Args<T, C>& args) {
  const int64_t p = args.partial_max_dim(2);
  return p > 0 ? p : 1;
}

// What one block computes: sequence s, kv head kvh, query heads [h0, h0 +
// heads) of its group (chunk blockIdx.x % chunks of kGroup heads), tokens [t0,
// t0 + n) of the context (partition blockIdx.y of partition_tokens tokens).
struct Work {
  int64_t s, kvh, h0, partition, t0, context, partitions;
  int heads, n;
  bool context_ok;
  bool idle;  // the partition lies past the context
};

template <int kGroup, typename T, typename C>
__device__ Work work_of(const Args<T, C>& args, int64_t chunks, int partition_tokens) {
  Work w;
  w.s = blockIdx.x / (args.KVH * chunks);
  w.kvh = blockIdx.x / chunks % args.KVH;
  const int64_t chunk = blockIdx.x % chunks, group = args.H / args.KVH;
  w.h0 = w.kvh * group + chunk * kGroup;
  w.heads = static_cast<int>(group - chunk * kGroup < kGroup ? group - chunk * kGroup : kGroup);
  w.partition = blockIdx.y;
  w.t0 = w.partition * partition_tokens;
  w.context = args.context_lens[w.s];
  w.context_ok = args.context_lens_in_range(w.context);
  w.partitions = w.context_ok ? (w.context + partition_tokens - 1) / partition_tokens : 1;
  w.idle = w.partition >= (w.partitions > 0 ? w.partitions : 1);
  w.n = static_cast<int>(w.context - w.t0 < partition_tokens ? w.context - w.t0 : partition_tokens);
  return w;
}

// An empty context gets zeros and one out of range NaN, as the spec says;
// returns whether that is the case (the block has nothing else to do).
template <int Dh, typename T, typename C>
__device__ bool wrote_a_context_without_tokens(const Args<T, C>& args, const Work& w) {
  if (w.context_ok && w.context > 0) return false;
  const float v = w.context_ok ? 0.f : nan_value();
  for (int i = threadIdx.x; i < w.heads * Dh; i += blockDim.x) {
    opgen::kernels::store(args.out + (w.s * args.H + w.h0) * Dh, i, v);
  }
  return true;
}

// Reads the partition's block ids into block_ids, checked once: every row
// address comes from shared memory instead of a dependent global load. Where
// one is outside the cache, the heads get NaN (the workspace's largest logit
// too, which the combining kernel turns into NaN) and it returns true.
template <int Dh, typename T, typename C>
__device__ bool met_a_bad_block(const Args<T, C>& args, const Work& w, int64_t P, int* block_ids) {
  bool bad = false;
  for (int j = threadIdx.x; j < (w.n + args.BS - 1) / args.BS; j += blockDim.x) {
    const int64_t id = args.block_tables[w.s * args.MB + w.t0 / args.BS + j];
    bad |= !args.block_tables_in_range(id);
    block_ids[j] = static_cast<int>(id);
  }
  if (!__syncthreads_or(bad)) return false;
  for (int i = threadIdx.x; i < w.heads * Dh; i += blockDim.x) {
    opgen::kernels::store(args.out + (w.s * args.H + w.h0) * Dh, i, nan_value());
  }
  if (w.partitions > 1) {
    for (int g = threadIdx.x; g < w.heads; g += blockDim.x) args.partial_max[(w.s * args.H + w.h0 + g) * P + w.partition] = nan_value();
  }
  return true;
}

// The partition's result for element d of head h0 + g: its softmax-weighted
// sum o, and the largest logit and sum of exponentials it was normalised by.
template <int Dh, typename T, typename C>
__device__ void store_result(const Args<T, C>& args, const Work& w, int64_t P, int g, int d, float o, float largest,
                             float sum) {
  o *= value_scale(args);
  if (w.partitions == 1) {
    opgen::kernels::store(args.out + (w.s * args.H + w.h0 + g) * Dh, d, o);
    return;
  }
  const int64_t slot = (w.s * args.H + w.h0 + g) * P + w.partition;
  args.partial_out[slot * Dh + d] = o;
  if (d == 0) {
    args.partial_max[slot] = largest;
    args.partial_sum[slot] = sum;
  }
}

// --- tensor cores (f16 and bf16 queries; caches of the same type, or fp8) -------------------

constexpr int kTile = 16;                    // tokens per tile: the M of mma.m16n8k16
constexpr int kMmaGroup = 8;                 // query heads per block: its N
constexpr int kMaxPartitionTokens = 2048;    // the block ids a block keeps in shared memory
// Tiles in each warp's ring: one in flight while the warp works on the
// other. Three or four measured no faster on the H100 for 16-bit caches, and
// slower on the H200 for fp8 ones (at 16 x 32768: 282 µs with 2, 286 with 3,
// 301 with 4): they hold more shared memory, so fewer blocks fit an SM.
constexpr int kMmaStages = 2;

// How a warp multiplies one tile of 16 tokens, staged in shared memory as
// 16-byte pieces, on the tensor cores: the logits (keys * query heads) and
// the weighted sum of the values (values^T * weights^T). `slot` places a
// row's pieces, permuted so that the reads of one instruction fall in
// different banks; `dh` names the head-dimension element of accumulator row
// mt * 16 + g + 8 * half.
template <typename T, typename C, int Dh, typename = void>
struct MmaTile;

// Caches of the query's type: ldmatrix gives the fragments as they lie.
template <typename T, int Dh>
struct MmaTile<T, T, Dh> {
  using M = T;                                     // the type the tensor cores multiply
  static constexpr int kRowPieces = Dh * 2 / 16;   // 16-byte pieces of a cache row
  static_assert(kRowPieces % 8 == 0, "the swizzle permutes 8 pieces");
  __device__ static int slot(int row, int piece) { return row * kRowPieces + (piece ^ (row & 7)); }
  __device__ static int dh(int mt, int g, int half) { return mt * 16 + g + 8 * half; }

  // Head g's query (q; zeros where absent) as B fragments: k the head
  // dimension, n the head. Returns the factor its logits take (1).
  __device__ static float load_query(const T* q, bool present, uint32_t (&query)[Dh / 16][2], int lane) {
    const int c = lane % 4;
#pragma unroll
    for (int kt = 0; kt < Dh / 16; ++kt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int d = kt * 16 + 2 * c + 8 * half;
        query[kt][half] = present ? uint32_t{q[d].bits} | uint32_t{q[d + 1].bits} << 16 : 0u;
      }
    }
    return 1.f;
  }
  // s[i]: the logit of token g + 8 * (i / 2) of the tile and head 2c + i % 2.
  __device__ static void logits(const uint4* keys, const uint32_t (&query)[Dh / 16][2], float (&s)[4], int lane) {
    const int quad = lane / 8, r8 = lane % 8;  // the tile and row whose address the lane gives ldmatrix
#pragma unroll
    for (int kt = 0; kt < Dh / 16; ++kt) {
      uint32_t a[4];
      opgen::kernels::ldmatrix_x4(a, keys + slot(r8 + 8 * (quad % 2), 2 * kt + quad / 2));
      opgen::kernels::mma_16x8x16<M>(s, a, query[kt]);
    }
  }
  __device__ static void accumulate(const uint4* values, const uint32_t (&weights)[2], float (&acc)[Dh / 16][4],
                                    int lane) {
    const int quad = lane / 8, r8 = lane % 8;
#pragma unroll
    for (int mt = 0; mt < Dh / 16; ++mt) {
      uint32_t a[4];
      opgen::kernels::ldmatrix_x4_trans(a, values + slot(r8 + 8 * (quad / 2), 2 * mt + quad % 2));
      opgen::kernels::mma_16x8x16<M>(acc[mt], a, weights);
    }
  }
};

// fp8 caches (e4m3fn, e5m2) under f16 or bf16 queries: the tensor cores
// multiply in f16, which holds every fp8 value exactly (one cvt a pair), and
// each head's query exactly too, scaled by a power of two (load_query). The
// fragments are read from shared memory as words and converted in registers;
// since a dot product may take its terms in any order, each lane reads
// whole words of a row: for the keys, lane c the c-th quarter of rows g and
// g + 8 (its query fragments follow the same order); for the values, lane g
// its own eighth of every 128 bytes of rows 2c, 2c + 1, 2c + 8, 2c + 9, which
// byte_perm pairs up by token (the accumulator's rows are then a
// permutation of the head dimension, which `dh` undoes).
template <typename T, typename C, int Dh>
struct MmaTile<T, C, Dh, std::enable_if_t<sizeof(C) == 1>> {
  using M = opgen::f16;
  static constexpr int kRowPieces = Dh / 16;
  static constexpr int kKeyPieces = Dh / 64;                // pieces of a key row each lane reads
  static constexpr int kValueBytes = (Dh < 128 ? Dh : 128) / 8;  // of each 128 bytes of a value row, per lane
  static constexpr int kValueWords = kValueBytes / 4;
  // Within each 8 pieces (128 bytes: the banks once), XOR by the row and by
  // which 8 they are: both read patterns above then meet 8 different
  // 16-byte bank groups among the 8 lanes of a phase (Dh 64's values: 2-way).
  __device__ static int slot(int row, int piece) {
    constexpr int kMask = kRowPieces < 8 ? kRowPieces - 1 : 7;
    return row * kRowPieces + (piece ^ ((row ^ 2 * (piece / 8)) & kMask));
  }
  __device__ static int dh(int mt, int g, int half) { return 128 * (mt / 8) + kValueBytes * g + 2 * (mt % 8) + half; }
  // The element of the head dimension that lane c's key word w of piece j, byte b, holds.
  __device__ static int key_dh(int c, int j, int w, int b) { return 16 * (c * kKeyPieces + j) + 4 * w + b; }

  // The scale 2^e brings the head's largest |q| into [2^14, 2^15): an f16
  // then holds each bf16 value exactly (8 significant bits in 11; but for
  // elements 2^38 and more below the head's largest, f16 subnormals) and
  // cannot overflow; the logits take the factor 2^-e back. e is at least
  // -113 (bf16's largest values) and held to at most 126, so that 2^e and
  // 2^-e are f32 normals: a head whose largest |q| is below 2^-112 lands
  // below 2^14 but still within f16's normals.
  __device__ static float load_query(const T* q, bool present, uint32_t (&query)[Dh / 16][2], int lane) {
    const int c = lane % 4;
    float largest = 0.f;
#pragma unroll
    for (int d = 0; d < Dh / 4; ++d) largest = fmaxf(largest, present ? fabsf(opgen::kernels::load(q, c * Dh / 4 + d)) : 0.f);
    largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, 1));
    largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, 2));  // the head's 4 lanes
    const int e = largest > 0.f && isfinite(largest) ? min(126, 14 - ilogbf(largest)) : 0;
    const float up = ldexpf(1.f, e);
    const auto at = [&](int d) { return present ? opgen::kernels::load(q, d) * up : 0.f; };
#pragma unroll
    for (int j = 0; j < kKeyPieces; ++j) {
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        query[j * 4 + w][0] = opgen::kernels::pack_pair<M>(at(key_dh(c, j, w, 0)), at(key_dh(c, j, w, 1)));
        query[j * 4 + w][1] = opgen::kernels::pack_pair<M>(at(key_dh(c, j, w, 2)), at(key_dh(c, j, w, 3)));
      }
    }
    return ldexpf(1.f, -e);
  }
  __device__ static void logits(const uint4* keys, const uint32_t (&query)[Dh / 16][2], float (&s)[4], int lane) {
    using opgen::kernels::f16_pair_of_fp8;
    const int g = lane / 4, c = lane % 4;
#pragma unroll
    for (int j = 0; j < kKeyPieces; ++j) {
      const uint4 top = keys[slot(g, c * kKeyPieces + j)], bottom = keys[slot(g + 8, c * kKeyPieces + j)];
      const uint32_t t[4] = {top.x, top.y, top.z, top.w}, b[4] = {bottom.x, bottom.y, bottom.z, bottom.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        // A: rows g, g + 8 (tokens); columns 2c, 2c + 1 the word's low bytes, 2c + 8, 2c + 9 its high ones.
        const uint32_t a[4] = {f16_pair_of_fp8<C>(t[w]), f16_pair_of_fp8<C>(b[w]), f16_pair_of_fp8<C>(t[w] >> 16),
                               f16_pair_of_fp8<C>(b[w] >> 16)};
        opgen::kernels::mma_16x8x16<M>(s, a, query[j * 4 + w]);
      }
    }
  }
  __device__ static void accumulate(const uint4* values, const uint32_t (&weights)[2], float (&acc)[Dh / 16][4],
                                    int lane) {
    using opgen::kernels::f16_pair_of_fp8;
    const int g = lane / 4, c = lane % 4;
#pragma unroll
    for (int j = 0; j < (Dh + 127) / 128; ++j) {
      const int at = j * 128 + g * kValueBytes, piece = at / 16, within = at % 16;  // bytes into each row
      uint32_t r[4][kValueWords];  // rows 2c, 2c + 1, 2c + 8, 2c + 9
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const auto* row = reinterpret_cast<const uint32_t*>(
            reinterpret_cast<const unsigned char*>(values + slot(2 * c + i % 2 + 8 * (i / 2), piece)) + within);
        if constexpr (kValueWords == 4) {
          const uint4 x = *reinterpret_cast<const uint4*>(row);
          r[i][0] = x.x, r[i][1] = x.y, r[i][2] = x.z, r[i][3] = x.w;
        } else {
          const uint2 x = *reinterpret_cast<const uint2*>(row);
          r[i][0] = x.x, r[i][1] = x.y;
        }
      }
#pragma unroll
      for (int w = 0; w < kValueWords; ++w) {
#pragma unroll
        for (int odd = 0; odd < 2; ++odd) {
          // Bytes 2 * odd and 2 * odd + 1 of the word: head-dimension rows g
          // and g + 8 of accumulator j * 8 + 2w + odd, paired by token.
          const uint32_t selector = odd ? 0x7362u : 0x5140u;
          const uint32_t near = __byte_perm(r[0][w], r[1][w], selector), far = __byte_perm(r[2][w], r[3][w], selector);
          const uint32_t a[4] = {f16_pair_of_fp8<C>(near), f16_pair_of_fp8<C>(near >> 16), f16_pair_of_fp8<C>(far),
                                 f16_pair_of_fp8<C>(far >> 16)};
          opgen::kernels::mma_16x8x16<M>(acc[j * 8 + 2 * w + odd], a, weights);
        }
      }
    }
  }
};

// Shared memory of attend_partition_mma: kMmaStages tiles of keys and values per
// warp, reused at the end for the warps' partial sums.
template <int Dh>
constexpr int kMergePitch = Dh + 4;  // floats per head: lanes 2c heads apart fall in different banks
template <typename T, typename C, int Dh>
constexpr int mma_shared_bytes() {
  const int ring = kWarps * kMmaStages * 2 * kTile * Dh * int(sizeof(C));
  const int merge = kWarps * kMmaGroup * kMergePitch<Dh> * 4;
  return ring > merge ? ring : merge;
}

template <typename T, typename C, int Dh>
__global__ void __launch_bounds__(kThreads) attend_partition_mma(Args<T, C> args, int64_t chunks, int partition_tokens) {
  using namespace opgen::kernels;
  using Tile = MmaTile<T, C, Dh>;
  constexpr int kTilePieces = kTile * Tile::kRowPieces;  // of one cache's tile
  constexpr int kPieceElements = 16 / int(sizeof(C));
  static_assert(kTilePieces % 32 == 0, "a tile is copied in whole rounds of the warp");
  extern __shared__ uint4 staged[];  // [kWarps][kMmaStages][keys, values][kTilePieces]
  __shared__ int block_ids[kMaxPartitionTokens / 16];
  __shared__ float warp_max[kWarps][kMmaGroup], warp_sum[kWarps][kMmaGroup];
  const int64_t P = workspace_partitions(args);
  const Work w = work_of<kMmaGroup>(args, chunks, partition_tokens);
  if (w.idle || wrote_a_context_without_tokens<Dh>(args, w) || met_a_bad_block<Dh>(args, w, P, block_ids)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;  // the fragment row and column pair of the lane (warp_mma.h)

  // The block's query heads as B fragments, zero past its heads, and the
  // logits' factor of heads 2c and 2c + 1 (in base 2: exp2 is one
  // instruction).
  uint32_t query[Dh / 16][2];
  const float factor = Tile::load_query(args.query + w.s * args.query_strides[0] + (w.h0 + g) * args.query_strides[1],
                                        g < w.heads, query, lane);
  float log2_scale[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    log2_scale[h] = args.scale * key_scale(args) * 1.4426950408889634f * __shfl_sync(0xffffffffu, factor, (2 * c + h) * 4);
  }

  // Warp `warp` takes tiles warp, warp + kWarps, ...: the block reads the
  // partition front to back. Its ring holds kMmaStages tiles in flight.
  const int tiles = (w.n + kTile - 1) / kTile;
  const int mine = tiles > warp ? (tiles - warp + kWarps - 1) / kWarps : 0;
  uint4* ring = staged + warp * kMmaStages * 2 * kTilePieces;
  const int64_t row_stride = args.KVH * Dh;  // elements from one token of a block to the next
  const auto issue = [&](int k) {
    if (k < mine) {
      const int first = (k * kWarps + warp) * kTile;  // a tile lies in one block: BS is a multiple of 16
      const int64_t base = (int64_t{block_ids[first / args.BS]} * args.BS + first % args.BS) * row_stride + w.kvh * Dh;
      uint4* keys = ring + k % kMmaStages * 2 * kTilePieces;
#pragma unroll
      for (int i = 0; i < kTilePieces / 32; ++i) {
        const int piece = i * 32 + lane, row = piece / Tile::kRowPieces, column = piece % Tile::kRowPieces;
        const int64_t at = base + row * row_stride + column * kPieceElements;
        const bool valid = first + row < w.n;  // rows past the context: zeros, never read
        cp_async_16(keys + Tile::slot(row, column), args.key_cache + at, valid);
        cp_async_16(keys + kTilePieces + Tile::slot(row, column), args.value_cache + at, valid);
      }
    }
    cp_async_commit();  // an empty group past the last tile keeps the count of groups regular
  };

  // One pass with an online softmax: per head, the largest logit m so far
  // (base 2), the lane's part of the sum l of exp2(logit - m), and the
  // weighted sum of the values, transposed (acc[mt]: rows mt*16 + g and + 8
  // of the head dimension, as Tile::dh names them; heads 2c, 2c+1).
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, acc[Dh / 16][4] = {};
#pragma unroll
  for (int k = 0; k < kMmaStages - 1; ++k) issue(k);
  for (int k = 0; k < mine; ++k) {
    issue(k + kMmaStages - 1);
    cp_async_wait<kMmaStages - 1>();
    __syncwarp();  // the tile's pieces, copied by every lane, are visible to all
    const uint4* keys = ring + k % kMmaStages * 2 * kTilePieces;
    const uint4* values = keys + kTilePieces;
    // The logits, transposed: s[i] for token g + 8 * (i / 2) of the tile and head 2c + i % 2.
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    Tile::logits(keys, query, s, lane);
    const int first = (k * kWarps + warp) * kTile;
#pragma unroll
    for (int i = 0; i < 4; ++i) s[i] = first + g + 8 * (i / 2) < w.n ? s[i] * log2_scale[i % 2] : -INFINITY;
    float p[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float top = fmaxf(s[h], s[h + 2]);  // finite: the tile's first token is in the context
#pragma unroll
      for (int offset = 4; offset < 32; offset *= 2) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
      const float grown = fmaxf(m[h], top), rescale = exp2f(m[h] - grown);  // 0 while m is -inf
      m[h] = grown;
      p[h] = exp2f(s[h] - grown);
      p[h + 2] = exp2f(s[h + 2] - grown);
      l[h] = l[h] * rescale + p[h] + p[h + 2];
#pragma unroll
      for (int mt = 0; mt < Dh / 16; ++mt) {
        acc[mt][h] *= rescale;
        acc[mt][h + 2] *= rescale;
      }
    }
    // The weights as the B fragment of values^T * weights^T: the accumulator
    // layout of s transposed, 8x8 tile by tile.
    using M = typename Tile::M;
    const uint32_t weights[2] = {movmatrix_trans(pack_pair<M>(p[0], p[1])), movmatrix_trans(pack_pair<M>(p[2], p[3]))};
    Tile::accumulate(values, weights, acc, lane);
    __syncwarp();  // every lane has read the stage before the next issue overwrites it
  }

  // Merge the warps: each scales its sums to the block's largest logit per
  // head and leaves them in shared memory, then every element adds the warps'
  // parts in one order.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int offset = 4; offset < 32; offset *= 2) l[h] += __shfl_xor_sync(0xffffffffu, l[h], offset);
    if (g == 0) warp_max[warp][2 * c + h] = m[h];
  }
  __syncthreads();  // also: no warp reads its ring any more
  float* merged = reinterpret_cast<float*>(staged);  // [kWarps][kMmaGroup][kMergePitch]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float largest = -INFINITY;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) largest = fmaxf(largest, warp_max[v][2 * c + h]);
    const float weight = m[h] == -INFINITY ? 0.f : exp2f(m[h] - largest);  // a warp without tiles adds nothing
    float* head = merged + (warp * kMmaGroup + 2 * c + h) * kMergePitch<Dh>;
#pragma unroll
    for (int mt = 0; mt < Dh / 16; ++mt) {
      head[Tile::dh(mt, g, 0)] = acc[mt][h] * weight;
      head[Tile::dh(mt, g, 1)] = acc[mt][h + 2] * weight;
    }
    if (g == 0) warp_sum[warp][2 * c + h] = l[h] * weight;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < w.heads * Dh; i += kThreads) {
    const int h = i / Dh, d = i % Dh;
    float o = 0.f, sum = 0.f, largest = -INFINITY;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) {
      o += merged[(v * kMmaGroup + h) * kMergePitch<Dh> + d];
      sum += warp_sum[v][h];
      largest = fmaxf(largest, warp_max[v][h]);
    }
    store_result<Dh>(args, w, P, h, d, o / sum, largest * 0.6931471805599453f, sum);  // the logit, in base e
  }
}

// --- CUDA cores (f32, or caches that are not 16-byte aligned) ------------------------------

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

// Partitions of kPartition tokens, kGroup <= 8 query heads per block.
template <typename T, typename C, int Dh, int kGroup>
__global__ void __launch_bounds__(kThreads, kGroup >= 8 ? 2 : 4) attend_partition(Args<T, C> args, int64_t chunks, bool aligned) {
  using namespace opgen::kernels;
  using Tiling = RowTiling<C, Dh>;  // the caches' rows
  constexpr int kE = Tiling::kE, kL = Tiling::kL, kRows = Tiling::kRows;
  // Rows each lane has in flight: fewer where the query heads and the sums
  // take many registers.
  constexpr int kUnroll = kGroup * kE >= 32 ? 2 : 4;
  // Sweeps whose copies are in flight: about 8 KiB of keys and values per warp.
  constexpr int kStageBytes = 2 * kUnroll * 32 * kE * int(sizeof(C));
  constexpr int kStages = 8192 / kStageBytes > 1 ? 8192 / kStageBytes : 1;
  constexpr int kSweep = kWarps * kRows * kUnroll;  // tokens the block reads per sweep
  __shared__ float sums[kGroup][Dh];  // the weighted sum of the values
  __shared__ float head_max[kGroup], head_sum[kGroup], warp_max_of[kWarps][kGroup];
  __shared__ int block_ids[kPartition / 16];  // the partition's blocks (BS >= 16 divides kPartition)
  __shared__ int64_t offsets[kPartition];     // each token's element offset in the caches, for kv head kvh
  const int64_t P = workspace_partitions(args);
  const Work w = work_of<kGroup>(args, chunks, kPartition);
  if (w.idle || wrote_a_context_without_tokens<Dh>(args, w)) return;
  const int n = w.n, heads = w.heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / kL, column = (lane % kL) * kE;  // the lane's row of the warp's kRows, its first element
  for (int i = threadIdx.x; i < kGroup * Dh; i += kThreads) (&sums[0][0])[i] = 0.f;
  if (threadIdx.x < kGroup) head_sum[threadIdx.x] = 0.f;
  if (met_a_bad_block<Dh>(args, w, P, block_ids)) return;  // its barrier also publishes the zeros above

  float q[kGroup][kE];
  const float logit_scale = args.scale * key_scale(args);
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      q[g][e] = g < heads ? opgen::kernels::load(args.query + w.s * args.query_strides[0] + (w.h0 + g) * args.query_strides[1], column + e) * logit_scale : 0.f;
    }
  }
  // Each token's row, once per block (a division by BS per token, not per
  // lane and load).
  for (int i = threadIdx.x; i < n; i += kThreads) {
    offsets[i] = ((int64_t{block_ids[i / args.BS]} * args.BS + i % args.BS) * args.KVH + w.kvh) * Dh;
  }
  __syncthreads();

  // The token of unrolled step u of a sweep starting at `base`, for this lane,
  // and this lane's part of its row in `cache`.
  const auto token = [&](int base, int u) { return base + (u * kWarps + warp) * kRows + sub; };
  const auto row = [&](const C* cache, int i) { return cache + offsets[i] + column; };

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
    constexpr int kPieces = kE * int(sizeof(C)) / 16;  // 16-byte copies per lane and row
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
            cp_async_16(&staged[sweep % kStages][warp][0][u][lane * kPieces + c],
                        reinterpret_cast<const uint4*>(row(args.key_cache, i)) + c, true);
            cp_async_16(&staged[sweep % kStages][warp][1][u][lane * kPieces + c],
                        reinterpret_cast<const uint4*>(row(args.value_cache, i)) + c, true);
          }
        }
      }
      cp_async_commit();  // an empty group past the last sweep keeps the count of groups regular
    };
#pragma unroll
    for (int sweep = 0; sweep < kStages - 1; ++sweep) issue(sweep);
    for (int sweep = 0; sweep < sweeps; ++sweep) {
      issue(sweep + kStages - 1);
      cp_async_wait<kStages - 1>();
      float k[kUnroll][kE], v[kUnroll][kE];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (token(sweep * kSweep, u) < n) {
          const C* kp = reinterpret_cast<const C*>(&staged[sweep % kStages][warp][0][u][lane * kPieces]);
          const C* vp = reinterpret_cast<const C*>(&staged[sweep % kStages][warp][1][u][lane * kPieces]);
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
    store_result<Dh>(args, w, P, g, d, sums[g][d] / head_sum[g], head_max[g], head_sum[g]);
  }
}

// --- combining the partitions ----------------------------------------------------------------

// One block per (sequence, head) of more than one partition: the partitions'
// outputs weighted by their share of the softmax's sum. A NaN largest logit
// (a partition that met a bad block id) makes the head NaN.
template <typename T, typename C, int Dh>
__global__ void __launch_bounds__(Dh) combine_partitions(Args<T, C> args, int partition_tokens) {
  const int64_t s = blockIdx.x / args.H, P = workspace_partitions(args);
  const int64_t context = args.context_lens[s];
  if (!args.context_lens_in_range(context) || context <= partition_tokens) return;  // written by the attention
  const int64_t partitions = (context + partition_tokens - 1) / partition_tokens;
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
  opgen::kernels::store(args.out + blockIdx.x * Dh, threadIdx.x, bad ? nan_value() : o / total);
}

// Tokens per partition of the tensor-core kernel: the workspace's 256,
// doubled while the grid keeps half as many blocks as the GPU holds at once.
// Longer partitions pay the prologue, the merge of the warps and the
// combining kernel less often, and on the H100 they win even where fewer
// blocks than the GPU holds remain (bench/RESULTS.md).
int mma_partition_tokens(int64_t blocks, int64_t max_context, int blocks_per_sm) {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  int tokens = kPartition;
  while (2 * tokens <= kMaxPartitionTokens && tokens < max_context &&
         2 * blocks * ((max_context + 2 * tokens - 1) / (2 * tokens)) >= int64_t{sms} * blocks_per_sm) {
    tokens *= 2;
  }
  return tokens;
}

template <typename T, typename C>
opgen::Status too_large(const Args<T, C>& args) {
  return opgen::Status::InvalidArgument("paged_attention_decode: " + std::to_string(args.S) + " sequences of up to " +
                                        std::to_string(args.MB * args.BS) + " tokens exceed the CUDA grid");
}

template <typename T, typename C, int Dh>
opgen::Status launch_mma(cudaStream_t stream, const Args<T, C>& args, int* partition_tokens) {
  const int64_t chunks = (args.H / args.KVH + kMmaGroup - 1) / kMmaGroup, blocks = args.S * args.KVH * chunks;
  constexpr int kBytes = mma_shared_bytes<T, C, Dh>();
  const auto kernel = attend_partition_mma<T, C, Dh>;
  if (opgen::Status s = opgen::allow_dynamic_shared<attend_partition_mma<T, C, Dh>, kBytes>(
          "paged_attention_decode attend_partition_mma");
      !s.ok()) {
    return s;
  }
  static const int per_sm = [&] {  // blocks an SM holds at once (shared memory bounds them)
    int n = 0;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, kBytes) == cudaSuccess && n > 0 ? n : 1;
  }();
  *partition_tokens = mma_partition_tokens(blocks, args.MB * args.BS, per_sm);
  const int64_t grid_y = (args.MB * args.BS + *partition_tokens - 1) / *partition_tokens;
  if (blocks > 0x7fffffff || grid_y > 65535) return too_large(args);
  kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(grid_y > 0 ? grid_y : 1)), kThreads, kBytes, stream>>>(
      args, chunks, *partition_tokens);
  return opgen::cuda_launch_status("attend_partition_mma");
}

template <typename T, typename C, int Dh, int kGroup>
opgen::Status launch_cuda_cores(cudaStream_t stream, const Args<T, C>& args, int64_t P, bool aligned) {
  const int64_t chunks = (args.H / args.KVH + kGroup - 1) / kGroup, blocks = args.S * args.KVH * chunks;
  if (blocks > 0x7fffffff || P > 65535) return too_large(args);
  attend_partition<T, C, Dh, kGroup><<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(P)), kThreads, 0, stream>>>(
      args, chunks, aligned);
  return opgen::cuda_launch_status("attend_partition");
}

template <typename T, typename C, int Dh>
opgen::Status launch(cudaStream_t stream, const Args<T, C>& args) {
  const int64_t P = workspace_partitions(args);
  if (P * kPartition < args.MB * args.BS) {
    return opgen::Status::Internal("paged_attention_decode: the spec's workspaces hold " + std::to_string(P) +
                                   " partitions a head, too few for " + std::to_string(args.MB * args.BS) +
                                   " tokens in partitions of " + std::to_string(kPartition) +
                                   " (kPartition and the spec's workspace shapes disagree)");
  }
  const bool aligned = (reinterpret_cast<uintptr_t>(args.key_cache) | reinterpret_cast<uintptr_t>(args.value_cache)) % 16 == 0;
  int partition_tokens = kPartition;
  const opgen::Status attended = [&] {
    if constexpr (sizeof(T) == 2 && (std::is_same_v<C, T> || sizeof(C) == 1)) {
      if (aligned) return launch_mma<T, C, Dh>(stream, args, &partition_tokens);
    }
    // Query heads per block: registers hold kGroup heads of the query and of
    // the sums, so a small group gets a small kGroup.
    const int64_t group = args.H / args.KVH;
    if (group == 1) return launch_cuda_cores<T, C, Dh, 1>(stream, args, P, aligned);
    if (group <= 4) return launch_cuda_cores<T, C, Dh, 4>(stream, args, P, aligned);
    return launch_cuda_cores<T, C, Dh, 8>(stream, args, P, aligned);
  }();
  if (!attended.ok() || args.MB * args.BS <= partition_tokens) return attended;  // no sequence has two partitions
  if (args.S * args.H > 0x7fffffff) {
    return opgen::Status::InvalidArgument("paged_attention_decode: too many sequence heads for the CUDA grid");
  }
  combine_partitions<T, C, Dh><<<static_cast<unsigned>(args.S * args.H), Dh, 0, stream>>>(args, partition_tokens);
  return opgen::cuda_launch_status("combine_partitions");
}

}  // namespace

template <typename T, typename C>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T, C>& args) {
  return with_Dh(args.Dh, [&](auto dh) { return launch<T, C, static_cast<int>(decltype(dh)::value)>(stream, args); });
}

}  // namespace opgen_ops::paged_attention_decode
