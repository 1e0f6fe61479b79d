// CUDA body of dynamic_per_token_scaled_fp8_quant: one block per row, as
// layer_norm's. Each thread reads its slice of the row in 16-byte vectors and
// keeps them in registers (K of them, 1 to 8, a template argument, so that a
// thread holds only the registers its rows need: rows of up to 32 KiB, D =
// 16384 in bf16), the block reduces the max |x|, and the same registers are
// scaled and converted (cuda_fp8.h, saturating), so that the row is read from
// memory once. Longer rows read it twice. A row whose start is not 16-byte
// aligned (D not a multiple of 16 / sizeof(T), or a pointer off alignment)
// goes element by element.
#include <cstdint>

#include "opgen/block_reduce.h"
#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen/row_blocks.h"
#include "opgen_ops/dynamic_per_token_scaled_fp8_quant.h"
#include "quant8.h"

namespace opgen_ops::dynamic_per_token_scaled_fp8_quant {
namespace {

constexpr int kThreads = 256;  // the most a block has
constexpr int kMaxVectorsPerThread = 8;

using quant8::Pack;

template <typename T, typename S, int V>
__device__ __forceinline__ S pack_max(const Pack<T, V>& p, S m) {
#pragma unroll
  for (int i = 0; i < V; ++i) m = fmax(m, fabs(static_cast<S>(opgen::kernels::load(p.v, i))));
  return m;
}

template <typename T, typename S, typename Q, int V>
__device__ __forceinline__ Pack<Q, V> pack_quant(const Pack<T, V>& p, S scale) {
  Pack<Q, V> o;
#pragma unroll
  for (int i = 0; i < V; ++i) o.v[i] = quant8::quantized<Q>(static_cast<S>(opgen::kernels::load(p.v, i)), scale);
  return o;
}

// The row's scale from its max |x|; thread 0 stores it.
template <typename T, typename S, typename Q>
__device__ __forceinline__ S row_scale(const Args<T, S, Q>& args, int64_t row, S amax) {
  const S scale = quant8::row_scale<Q>(amax, args.scale_ub);
  if (threadIdx.x == 0) args.scale[row] = scale;
  return scale;
}

// V elements a vector, K vectors a thread held in registers, kBlock threads.
template <typename T, typename S, typename Q, int V, int K, int kBlock>
__global__ void __launch_bounds__(kBlock) rows_in_registers(Args<T, S, Q> args) {
  __shared__ S partial[kBlock / 32];
  const int64_t vecs = args.D / V;
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    const auto* x = reinterpret_cast<const Pack<T, V>*>(args.x + row * args.D);
    auto* out = reinterpret_cast<Pack<Q, V>*>(args.out + row * args.D);
    Pack<T, V> held[K];
    S amax = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t j = int64_t{k} * kBlock + threadIdx.x;
      if (j < vecs) {
        held[k] = x[j];
        amax = pack_max<T, S, V>(held[k], amax);
      }
    }
    const S scale = row_scale(args, row, opgen::kernels::block_max<kBlock>(amax, partial));
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t j = int64_t{k} * kBlock + threadIdx.x;
      if (j < vecs) out[j] = pack_quant<T, S, Q, V>(held[k], scale);
    }
  }
}

// Rows too long for registers, or not on 16 bytes (V = 1): read twice.
template <typename T, typename S, typename Q, int V>
__global__ void __launch_bounds__(kThreads) rows_from_memory(Args<T, S, Q> args) {
  __shared__ S partial[kThreads / 32];
  const int64_t vecs = args.D / V;
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    const auto* x = reinterpret_cast<const Pack<T, V>*>(args.x + row * args.D);
    auto* out = reinterpret_cast<Pack<Q, V>*>(args.out + row * args.D);
    S amax = 0;
    for (int64_t j = threadIdx.x; j < vecs; j += kThreads) amax = pack_max<T, S, V>(x[j], amax);
    const S scale = row_scale(args, row, opgen::kernels::block_max<kThreads>(amax, partial));
    for (int64_t j = threadIdx.x; j < vecs; j += kThreads) out[j] = pack_quant<T, S, Q, V>(x[j], scale);
  }
}

template <typename T, typename S, typename Q, int V>
struct InRegisters {
  template <int K, int kBlock>
  static auto kernel() { return rows_in_registers<T, S, Q, V, K, kBlock>; }
};

// In registers where the row is on 16 bytes and fits (opgen/row_blocks.h);
// else from memory.
template <typename T, typename S, typename Q>
opgen::kernels::RowLaunch<void (*)(Args<T, S, Q>)> kernel_for(const Args<T, S, Q>& args) {
  constexpr int V = 16 / int(sizeof(T));
  // Every row starts on 16 bytes of x (and V bytes of out) when the bases
  // do and D is a multiple of V.
  const bool vectors = args.D % V == 0 && reinterpret_cast<uintptr_t>(args.x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(args.out) % V == 0;
  if (!vectors) return {rows_from_memory<T, S, Q, 1>, kThreads};
  const auto launch =
      opgen::kernels::rows_in_registers<InRegisters<T, S, Q, V>, kThreads, kMaxVectorsPerThread>(args.D / V);
  if (launch.kernel) return launch;
  return {rows_from_memory<T, S, Q, V>, kThreads};
}

}  // namespace

template <typename T, typename S, typename Q>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T, S, Q>& args) {
  // CUDA grids hold at most 2^31 - 1 blocks in x; the kernels loop over the rest.
  const unsigned blocks = static_cast<unsigned>(args.batch < 0x7fffffff ? args.batch : 0x7fffffff);
  const auto launch = kernel_for(args);
  launch.kernel<<<blocks, launch.threads, 0, stream>>>(args);
  return opgen::cuda_launch_status("dynamic_per_token_scaled_fp8_quant");
}

}  // namespace opgen_ops::dynamic_per_token_scaled_fp8_quant
