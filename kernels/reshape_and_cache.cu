// CUDA body of reshape_and_cache: one thread per element of the new tokens'
// keys and values, over a grid-stride loop (consecutive threads, consecutive
// elements of a head, so both reads and writes coalesce); the caches' outputs
// already hold the caches, so only the new rows are written. The slots in
// range are distinct (the spec's `unique`), so each element has one writer.
// Each element is converted to the caches' dtype as cache_dtype.h says; the
// scales are read on the device, by every thread (one cached load).
#include <cstdint>

#include "cache_dtype.h"
#include "opgen/cuda_status.h"
#include "opgen_ops/reshape_and_cache.h"

namespace opgen_ops::reshape_and_cache {
namespace {

template <typename T, typename C, typename I>
__global__ void write_tokens(Args<T, C, I> args) {
  const int64_t per_token = args.KVH * args.Dh, n = args.N * per_token;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = k / per_token, h = k % per_token / args.Dh, d = k % args.Dh;
    const int64_t slot = args.slot_mapping[t];
    if (!args.slot_mapping_in_range(slot)) continue;  // padding (-1), or outside the caches
    const int64_t at = slot * per_token + h * args.Dh + d;
    args.key_cache_out[at] = cache_dtype::cached<C>(args.key[t * args.key_strides[0] + h * args.key_strides[1] + d],
                                                    args.k_scale);
    args.value_cache_out[at] = cache_dtype::cached<C>(
        args.value[t * args.value_strides[0] + h * args.value_strides[1] + d], args.v_scale);
  }
}

}  // namespace

template <typename T, typename C, typename I>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T, C, I>& args) {
  constexpr int kThreads = 256;
  const int64_t n = args.N * args.KVH * args.Dh;
  if (n == 0) return opgen::Status::Ok();  // no token (the caches are not empty): a grid of 0 blocks is an error
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  write_tokens<T, C, I><<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("write_tokens");
}

}  // namespace opgen_ops::reshape_and_cache
