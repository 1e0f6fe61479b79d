// CUDA body of kv_cache_write: one thread per new value over a grid-stride
// loop; cache_out already holds the cache, so only the new rows are written.
#include <cstdint>

#include "opgen/cuda_status.h"
#include "opgen_ops/kv_cache_write.h"

namespace opgen_ops::kv_cache_write {
namespace {

template <typename T>
__global__ void write_rows(Args<T> args) {
  const int64_t n = args.B * args.H;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / args.H, h = k % args.H;
    const int64_t p = args.pos[b];
    if (!args.pos_in_range(p)) continue;  // dropped, as documented in the spec
    args.cache_out[(b * args.S + p) * args.H + h] = args.values[k];
  }
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  constexpr int kThreads = 256;
  const int64_t n = args.B * args.H;
  if (n == 0) return opgen::Status::Ok();
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  write_rows<T><<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("write_rows");
}

}  // namespace opgen_ops::kv_cache_write
