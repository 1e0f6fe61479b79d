// CUDA body of rms_norm_dynamic_per_token_quant: one block per row. Where the
// rows allow 16-byte vectors and fit the block's registers (D <= 256 threads
// x 8 vectors: 16384 in bf16; a row of at most 128 vectors gets a block of as
// many threads as it has vectors, rounded up to a warp: opgen/row_blocks.h),
// each thread reads its part of x (and of residual, to which it writes the
// sum at once) in 16-byte vectors and keeps them in registers as read: the
// block sums the squares of x + residual (in f32, unrounded), each thread
// normalises its values into x's registers (T holds them exactly), the block
// takes their max |y|, and the same registers are quantised and stored: x
// and residual are read once, residual and out written once, the weight read
// from cache. With residual or without, two instantiations, so that a call
// without holds no registers for it.
// Other rows go through memory three times (sum, max, store), residual
// written last, since the first two passes read it. The arithmetic is the
// CPU body's (rms_norm_quant.h, quant8.h), so the results are the same,
// computed with fewer instructions where the kernel is bound by them (the
// sixth session's profile: 42 a bf16 element, the SM 82% busy, DRAM 24%): f16
// and bf16 values in pairs, and the division by the scale as FMAs from its
// reciprocal (quant8::quotient), each exact.
#include <cstdint>

#include "opgen/block_reduce.h"
#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen/row_blocks.h"
#include "opgen_ops/rms_norm_dynamic_per_token_quant.h"
#include "quant8.h"
#include "rms_norm_quant.h"

namespace opgen_ops::rms_norm_dynamic_per_token_quant {
namespace {

constexpr int kThreads = 256;  // the most a block has
constexpr int kMaxVectorsPerThread = 8;

using opgen::kernels::load;
using opgen::kernels::store;
using quant8::Pack;

template <int V, typename E>
__device__ __forceinline__ Pack<E, V> load_pack(const E* p) {
  return *reinterpret_cast<const Pack<E, V>*>(p);
}
template <int V, typename E>
__device__ __forceinline__ void store_pack(E* p, const Pack<E, V>& v) {
  *reinterpret_cast<Pack<E, V>*>(p) = v;
}

// Element j of s = x + residual (f32, unrounded; x alone without residual).
template <bool kResidual, typename T, int V>
__device__ __forceinline__ float sum_at(const Pack<T, V>& x, const Pack<T, V>& r, int j) {
  if constexpr (kResidual) {
    return load(x.v, j) + load(r.v, j);
  } else {
    return load(x.v, j);
  }
}

// Adds the squares of the V sums to `squares`.
template <bool kResidual, typename T, int V>
__device__ __forceinline__ void add_squares(const Pack<T, V>& x, const Pack<T, V>& r, double& squares) {
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const float s = sum_at<kResidual>(x, r, j);
    squares += static_cast<double>(s) * s;
  }
}

// The V sums rounded to T: the new residual.
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> rounded_sum(const Pack<T, V>& x, const Pack<T, V>& r) {
  Pack<T, V> sum;
#pragma unroll
  for (int j = 0; j < V; ++j) store(sum.v, j, sum_at<true>(x, r, j));
  return sum;
}

// Two values of a 2-byte T (f16, bf16) as CUDA's paired type, whose multiply
// rounds the exact product once: a product of two T values is exact in f32,
// so it gives the f32 product rounded to T, as rms_norm_quant.h's does.
template <typename T>
struct Pair;
template <>
struct Pair<opgen::bf16> {
  using type = __nv_bfloat162;
  static __device__ type from(float a, float b) { return __floats2bfloat162_rn(a, b); }
  static __device__ float2 to_float2(type p) { return __bfloat1622float2(p); }
};
template <>
struct Pair<opgen::f16> {
  using type = __half2;
  static __device__ type from(float a, float b) { return __floats2half2_rn(a, b); }
  static __device__ float2 to_float2(type p) { return __half22float2(p); }
};

// Whether a vector of V T values goes through the paired instructions.
template <typename T, int V>
inline constexpr bool kPaired = sizeof(T) == 2 && V % 2 == 0;

// The V normalised values, each a T value (rms_norm_quant.h), so that T
// holds them exactly; in pairs where T is 2 bytes: T(s * rstd) two at a time,
// then times the weights in T's paired multiply.
template <bool kResidual, typename T, int V>
__device__ __forceinline__ Pack<T, V> normalize(const Pack<T, V>& x, const Pack<T, V>& r, const Pack<T, V>& w,
                                                float rstd) {
  Pack<T, V> y;
  if constexpr (kPaired<T, V>) {
    using P = Pair<T>;
    auto* out = reinterpret_cast<typename P::type*>(y.v);
    const auto* weight = reinterpret_cast<const typename P::type*>(w.v);
#pragma unroll
    for (int j = 0; j < V / 2; ++j) {
      const auto scaled = P::from(sum_at<kResidual>(x, r, 2 * j) * rstd, sum_at<kResidual>(x, r, 2 * j + 1) * rstd);
      out[j] = __hmul2_rn(scaled, weight[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      store(y.v, j, rms_norm_quant::normalized<T>(sum_at<kResidual>(x, r, j), rstd, load(w.v, j)));
    }
  }
  return y;
}

// max(amax, the V values' |y|), ignoring a NaN as the block's reduction does
// (in pairs, __hmax2 does too; the max of T values is one of them, exact).
template <typename T, int V>
__device__ __forceinline__ float max_abs(const Pack<T, V>& y, float amax) {
  if constexpr (kPaired<T, V>) {
    using P = Pair<T>;
    const auto* pairs = reinterpret_cast<const typename P::type*>(y.v);
    auto m = __habs2(pairs[0]);
#pragma unroll
    for (int j = 1; j < V / 2; ++j) m = __hmax2(m, __habs2(pairs[j]));
    const float2 f = P::to_float2(m);
    return fmaxf(amax, fmaxf(f.x, f.y));
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) amax = fmaxf(amax, fabsf(load(y.v, j)));
    return amax;
  }
}

template <typename Q, typename T, int V>
__device__ __forceinline__ Pack<Q, V> quantize(const Pack<T, V>& y, const quant8::Divisor& scale) {
  Pack<Q, V> o;
  if constexpr (kPaired<T, V> && !quant8::kIsInt<Q>) {
    using P = Pair<T>;
    const auto* pairs = reinterpret_cast<const typename P::type*>(y.v);
    auto* out = reinterpret_cast<uint16_t*>(o.v);
#pragma unroll
    for (int j = 0; j < V / 2; ++j) {
      const float2 f = P::to_float2(pairs[j]);
      out[j] = quant8::quantized2<Q>(f.x, f.y, scale);
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = quant8::quantized<Q>(load(y.v, j), scale);
  }
  return o;
}

// The row's scratch for the block's reductions: the warps' partial sums,
// then their maxima.
template <int kBlock>
struct Partials {
  double squares[kBlock / 32];
  float amax[kBlock / 32];
};

template <int kBlock, typename T, typename Q>
__device__ __forceinline__ float block_rstd(const Args<T, Q>& args, double squares, Partials<kBlock>& p) {
  return rms_norm_quant::rstd_of(opgen::kernels::block_sum<kBlock>(squares, p.squares), args.D, args.eps);
}

// The row's scale from the block's max |y|; thread 0 stores it.
template <int kBlock, typename T, typename Q>
__device__ __forceinline__ float block_scale(const Args<T, Q>& args, int64_t row, float amax, Partials<kBlock>& p) {
  const float scale = quant8::row_scale<Q>(opgen::kernels::block_max<kBlock>(amax, p.amax), args.scale_ub);
  if (threadIdx.x == 0) args.scale[row] = scale;
  return scale;
}

// V elements a vector, K vectors a thread held in registers as loaded (x,
// then the normalised values in its place; residual's only with kResidual),
// kBlock threads.
template <typename T, typename Q, bool kResidual, int V, int K, int kBlock>
__global__ void __launch_bounds__(kBlock) rows_in_registers(Args<T, Q> args) {
  __shared__ Partials<kBlock> partials;
  const int64_t d = args.D;
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    const T* x = args.x + row * args.x_strides[0];
    T* residual = kResidual ? args.residual_out + row * d : nullptr;
    Q* out = args.out + row * d;
    // Every load of the row first: the stores into residual below may alias
    // x for all the compiler knows, so loads after them would wait for each.
    Pack<T, V> xs[K], rs[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t col = int64_t{threadIdx.x + k * kBlock} * V;
      if (col >= d) continue;
      xs[k] = load_pack<V>(x + col);
      if constexpr (kResidual) rs[k] = load_pack<V>(residual + col);
    }
    double squares = 0.0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t col = int64_t{threadIdx.x + k * kBlock} * V;
      if (col >= d) continue;
      add_squares<kResidual>(xs[k], rs[k], squares);
      if constexpr (kResidual) store_pack<V>(residual + col, rounded_sum(xs[k], rs[k]));
    }
    const float rstd = block_rstd(args, squares, partials);
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t col = int64_t{threadIdx.x + k * kBlock} * V;
      if (col >= d) continue;
      xs[k] = normalize<kResidual>(xs[k], rs[k], load_pack<V>(args.weight + col), rstd);
      amax = max_abs(xs[k], amax);
    }
    const quant8::Divisor scale(block_scale(args, row, amax, partials));
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t col = int64_t{threadIdx.x + k * kBlock} * V;
      if (col < d) store_pack<V>(out + col, quantize<Q>(xs[k], scale));
    }
  }
}

// Rows too long for registers, or not on 16 bytes (V = 1): three passes over
// memory; residual is written in the last, after the others have read it.
template <typename T, typename Q, bool kResidual, int V>
__global__ void __launch_bounds__(kThreads) rows_from_memory(Args<T, Q> args) {
  __shared__ Partials<kThreads> partials;
  const int64_t d = args.D;
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    const T* x = args.x + row * args.x_strides[0];
    T* residual = kResidual ? args.residual_out + row * d : nullptr;
    Q* out = args.out + row * d;
    Pack<T, V> r;
    double squares = 0.0;
    for (int64_t col = threadIdx.x * int64_t{V}; col < d; col += kThreads * V) {
      if constexpr (kResidual) r = load_pack<V>(residual + col);
      add_squares<kResidual>(load_pack<V>(x + col), r, squares);
    }
    const float rstd = block_rstd(args, squares, partials);
    float amax = 0.0f;
    for (int64_t col = threadIdx.x * int64_t{V}; col < d; col += kThreads * V) {
      if constexpr (kResidual) r = load_pack<V>(residual + col);
      amax = max_abs(normalize<kResidual>(load_pack<V>(x + col), r, load_pack<V>(args.weight + col), rstd), amax);
    }
    const quant8::Divisor scale(block_scale(args, row, amax, partials));
    for (int64_t col = threadIdx.x * int64_t{V}; col < d; col += kThreads * V) {
      const Pack<T, V> xv = load_pack<V>(x + col);
      if constexpr (kResidual) r = load_pack<V>(residual + col);
      const Pack<T, V> y = normalize<kResidual>(xv, r, load_pack<V>(args.weight + col), rstd);
      store_pack<V>(out + col, quantize<Q>(y, scale));
      if constexpr (kResidual) store_pack<V>(residual + col, rounded_sum(xv, r));
    }
  }
}

template <typename T, typename Q, bool kResidual, int V>
struct InRegisters {
  template <int K, int kBlock>
  static auto kernel() { return rows_in_registers<T, Q, kResidual, V, K, kBlock>; }
};

// In registers where every row starts on 16 bytes and fits (opgen/row_blocks.h);
// else from memory, in vectors where the rows allow them.
template <bool kResidual, typename T, typename Q>
opgen::kernels::RowLaunch<void (*)(Args<T, Q>)> kernel_for(const Args<T, Q>& args) {
  using opgen::kernels::aligned16;
  constexpr int V = 16 / int(sizeof(T));
  // Each row of x, residual and out starts on a vector (16 bytes of T, V
  // bytes of Q) when the bases do and D and x's row stride are multiples of V.
  const bool vectors = args.D % V == 0 && args.x_strides[0] % V == 0 && aligned16(args.x) &&
                       aligned16(args.weight) && (!kResidual || aligned16(args.residual_out)) &&
                       reinterpret_cast<uintptr_t>(args.out) % V == 0;
  if (!vectors) return {rows_from_memory<T, Q, kResidual, 1>, kThreads};
  const auto launch =
      opgen::kernels::rows_in_registers<InRegisters<T, Q, kResidual, V>, kThreads, kMaxVectorsPerThread>(args.D / V);
  if (launch.kernel) return launch;
  return {rows_from_memory<T, Q, kResidual, V>, kThreads};
}

}  // namespace

template <typename T, typename Q>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T, Q>& args) {
  // CUDA grids hold at most 2^31 - 1 blocks in x; the kernels loop over the rest.
  const unsigned blocks = static_cast<unsigned>(args.batch < 0x7fffffff ? args.batch : 0x7fffffff);
  const auto launch = args.residual_out != nullptr ? kernel_for<true>(args) : kernel_for<false>(args);
  launch.kernel<<<blocks, launch.threads, 0, stream>>>(args);
  return opgen::cuda_launch_status("rms_norm_dynamic_per_token_quant");
}

}  // namespace opgen_ops::rms_norm_dynamic_per_token_quant
