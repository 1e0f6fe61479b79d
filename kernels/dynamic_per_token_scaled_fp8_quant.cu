// CUDA body of dynamic_per_token_scaled_fp8_quant: one block per row. Each
// thread reads its slice of the row in 16-byte vectors and keeps them in
// registers (up to kMaxVecs of them: rows of 64 KiB, D = 32768 in bf16, 16384
// in f32), the block reduces the max |x|, and the same registers are scaled
// and converted (cuda_fp8.h, saturating), so that the row is read from memory
// once. Longer rows read it twice. A row whose start is not 16-byte aligned
// (D not a multiple of 16 / sizeof(T), or a pointer off alignment) goes
// element by element.
#include <cuda_fp8.h>

#include <cstdint>

#include "fp8_quant.h"
#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/dynamic_per_token_scaled_fp8_quant.h"

namespace opgen_ops::dynamic_per_token_scaled_fp8_quant {
namespace {

constexpr int kMaxThreads = 512;
constexpr int kMaxVecs = 8;  // vectors a thread holds: 32 registers of row

template <typename Q> constexpr __nv_fp8_interpretation_t kInterpretation = __NV_E4M3;
template <> constexpr __nv_fp8_interpretation_t kInterpretation<opgen::f8e5m2> = __NV_E5M2;

// V elements that move as one load or store (16 bytes of T; V bytes of Q).
template <typename E, int V>
struct alignas(sizeof(E) * V) Pack {
  E v[V];
};

template <typename Q>
__device__ __forceinline__ uint8_t to_fp8(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, kInterpretation<Q>);
}
template <typename Q>
__device__ __forceinline__ uint8_t to_fp8(double v) {
  return __nv_cvt_double_to_fp8(v, __NV_SATFINITE, kInterpretation<Q>);
}

// The max over the block (fmax: a NaN is ignored), which every thread gets.
template <typename S>
__device__ __forceinline__ S block_max(S v, S* partial) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? partial[lane] : S(0);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  v = partial[0];
  __syncthreads();  // partial is reused by the next row
  return v;
}

template <typename T, typename S, typename Q, int V>
__device__ __forceinline__ S pack_max(const Pack<T, V>& p, S m) {
#pragma unroll
  for (int i = 0; i < V; ++i) m = fmax(m, fabs(static_cast<S>(opgen::kernels::load(p.v, i))));
  return m;
}

template <typename T, typename S, typename Q, int V>
__device__ __forceinline__ Pack<Q, V> pack_quant(const Pack<T, V>& p, S scale) {
  Pack<Q, V> o;
#pragma unroll
  for (int i = 0; i < V; ++i) o.v[i].bits = to_fp8<Q>(static_cast<S>(opgen::kernels::load(p.v, i)) / scale);
  return o;
}

// V elements a vector: 16 / sizeof(T) where the rows allow, else 1.
template <typename T, typename S, typename Q, int V>
__global__ void __launch_bounds__(kMaxThreads) quant_rows(Args<T, S, Q> args) {
  __shared__ S partial[kMaxThreads / 32];
  const int64_t vecs = args.D / V;
  // Uniform over the grid: whether a thread's vectors fit its registers.
  const bool in_registers = vecs <= int64_t{kMaxVecs} * blockDim.x;
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    const auto* x = reinterpret_cast<const Pack<T, V>*>(args.x + row * args.D);
    auto* out = reinterpret_cast<Pack<Q, V>*>(args.out + row * args.D);
    Pack<T, V> held[kMaxVecs];
    S amax = 0;
    if (in_registers) {
#pragma unroll
      for (int k = 0; k < kMaxVecs; ++k) {
        const int64_t j = int64_t{k} * blockDim.x + threadIdx.x;
        if (j < vecs) {
          held[k] = x[j];
          amax = pack_max<T, S, Q, V>(held[k], amax);
        }
      }
    } else {
      for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) amax = pack_max<T, S, Q, V>(x[j], amax);
    }
    amax = block_max(amax, partial);
    if (args.scale_ub != nullptr) amax = fmin(amax, *args.scale_ub);
    const S scale = fmax(amax / static_cast<S>(Fp8<Q>::kMax), min_scale<Q, S>());
    if (threadIdx.x == 0) args.scale[row] = scale;
    if (in_registers) {
#pragma unroll
      for (int k = 0; k < kMaxVecs; ++k) {
        const int64_t j = int64_t{k} * blockDim.x + threadIdx.x;
        if (j < vecs) out[j] = pack_quant<T, S, Q, V>(held[k], scale);
      }
    } else {
      for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) out[j] = pack_quant<T, S, Q, V>(x[j], scale);
    }
  }
}

template <typename T, typename S, typename Q, int V>
opgen::Status launch(cudaStream_t stream, const Args<T, S, Q>& args) {
  // About four vectors a thread: enough threads to keep loads in flight, few
  // enough that a row's vectors fill their registers.
  const int64_t vecs = args.D / V;
  int64_t threads = ((vecs + 3) / 4 + 31) / 32 * 32;
  threads = threads < 64 ? 64 : threads > kMaxThreads ? kMaxThreads : threads;
  // CUDA grids hold at most 2^31 - 1 blocks in x; the kernel loops over the rest.
  const int64_t blocks = args.batch < 0x7fffffff ? args.batch : 0x7fffffff;
  quant_rows<T, S, Q, V><<<static_cast<unsigned>(blocks), static_cast<unsigned>(threads), 0, stream>>>(args);
  return opgen::cuda_launch_status("quant_rows");
}

}  // namespace

template <typename T, typename S, typename Q>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T, S, Q>& args) {
  constexpr int kVec = 16 / int(sizeof(T));
  // Every row starts on 16 bytes of x (and kVec bytes of out) when the bases
  // do and D is a multiple of kVec.
  const bool vectors = args.D % kVec == 0 && reinterpret_cast<uintptr_t>(args.x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(args.out) % kVec == 0;
  return vectors ? launch<T, S, Q, kVec>(stream, args) : launch<T, S, Q, 1>(stream, args);
}

}  // namespace opgen_ops::dynamic_per_token_scaled_fp8_quant
