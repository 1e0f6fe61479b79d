// CUDA body of merge_attn_states: one pass over memory, each thread a vector
// of V elements of one (token, head) row, 16 bytes where D and the pointers
// allow (element by element otherwise): both partial outputs' vectors are
// loaded before the row's two lse arrive, weighted in f32 and stored. The
// threads of a row read the same two lse (one L1 line); the first writes
// output_lse. Indices are 32-bit where the vectors number fewer than 2^31
// (the divisions that find a thread's row cost a third of the 64-bit ones).
#include <cmath>
#include <cstdint>

#include "opgen/cuda_status.h"
#include "opgen/elementwise.h"
#include "opgen_ops/merge_attn_states.h"

namespace opgen_ops::merge_attn_states {
namespace {

constexpr int kThreads = 256;

// The two parts' weights for the row whose lse are p and s (the spec's
// formula); `empty` where neither part saw a key (both -inf, +inf counted as
// -inf): then the output is the prefix's and its lse -inf.
struct Weights {
  float prefix, suffix, lse;
  bool empty;
};

__device__ __forceinline__ Weights weights(float p, float s) {
  if (p == INFINITY) p = -INFINITY;
  if (s == INFINITY) s = -INFINITY;
  const float m = fmaxf(p, s);
  if (m == -INFINITY) return {1.0f, 0.0f, -INFINITY, true};
  const float a = expf(p - m), b = expf(s - m), sum = a + b;
  return {a / sum, b / sum, logf(sum) + m, false};
}

// One thread per vector of V elements, over a grid-stride loop; I is the
// index type (uint32_t where 2 * vectors < 2^32, so that i + stride cannot wrap).
template <typename T, int V, typename I>
__global__ void __launch_bounds__(kThreads) merge_vectors(Args<T> args, I vectors_per_row, I vectors) {
  const I tokens = static_cast<I>(args.N), heads = static_cast<I>(args.H);
  for (I i = blockIdx.x * I{kThreads} + threadIdx.x; i < vectors; i += gridDim.x * I{kThreads}) {
    const I row = i / vectors_per_row;  // token * H + head
    const I token = row / heads, head = row - token * heads;
    const I at = head * tokens + token;  // the lse are [H, N]
    const int64_t offset = static_cast<int64_t>(i) * V;  // rows are D = vectors_per_row * V elements apart
    float prefix[V], suffix[V], out[V];
    opgen::kernels::load_vec<V>(args.prefix_output + offset, true, prefix);
    opgen::kernels::load_vec<V>(args.suffix_output + offset, true, suffix);
    const Weights w = weights(args.prefix_lse[at], args.suffix_lse[at]);
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = w.empty ? prefix[k] : fmaf(prefix[k], w.prefix, suffix[k] * w.suffix);
    opgen::kernels::store_vec<V>(args.output + offset, true, out);
    if (args.output_lse != nullptr && i == row * vectors_per_row) args.output_lse[at] = w.lse;
  }
}

// D = 0: the rows have no elements, but output_lse (asked for) has its values.
template <typename T>
__global__ void __launch_bounds__(kThreads) merge_lse_only(Args<T> args) {
  const int64_t count = args.N * args.H;
  for (int64_t at = blockIdx.x * int64_t{kThreads} + threadIdx.x; at < count; at += int64_t{gridDim.x} * kThreads) {
    args.output_lse[at] = weights(args.prefix_lse[at], args.suffix_lse[at]).lse;
  }
}

template <typename T, int V>
opgen::Status launch(cudaStream_t stream, const Args<T>& args) {
  const int64_t per_row = args.D / V, vectors = args.N * args.H * per_row;
  // CUDA grids hold at most 2^31 - 1 blocks in x; the loop covers the rest.
  const int64_t blocks = (vectors + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 0x7fffffff ? blocks : 0x7fffffff);
  if (vectors < (int64_t{1} << 31)) {
    merge_vectors<T, V, uint32_t>
        <<<grid, kThreads, 0, stream>>>(args, static_cast<uint32_t>(per_row), static_cast<uint32_t>(vectors));
  } else {
    merge_vectors<T, V, uint64_t>
        <<<grid, kThreads, 0, stream>>>(args, static_cast<uint64_t>(per_row), static_cast<uint64_t>(vectors));
  }
  return opgen::cuda_launch_status("merge_attn_states");
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  if (args.D == 0) {  // the bindings call the body with no output elements only for output_lse
    const int64_t blocks = (args.N * args.H + kThreads - 1) / kThreads;
    merge_lse_only<T><<<static_cast<unsigned>(blocks < 0x7fffffff ? blocks : 0x7fffffff), kThreads, 0, stream>>>(args);
    return opgen::cuda_launch_status("merge_attn_states");
  }
  constexpr int V = 16 / int(sizeof(T));
  // Every vector is on 16 bytes when the bases are and D is a multiple of V.
  const bool vectors = args.D % V == 0 && opgen::kernels::aligned16(args.prefix_output) &&
                       opgen::kernels::aligned16(args.suffix_output) && opgen::kernels::aligned16(args.output);
  return vectors ? launch<T, V>(stream, args) : launch<T, 1>(stream, args);
}

}  // namespace opgen_ops::merge_attn_states
