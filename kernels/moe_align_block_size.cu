// CUDA body of moe_align_block_size, in three kernels after zeroing the
// counts: (1) each entry adds one to its expert's count with an atomic, while
// the grid fills sorted_token_ids with the padding index; (2) one block scans
// the padded counts into each expert's offset (cub's block scan, 1024 experts
// a round), writes expert_ids and the padded total, and leaves each offset in
// the counts as the expert's next free slot; (3) each entry takes a slot of
// its expert's group with an atomic. The order within a group is that of the
// atomics, as in vLLM's kernel; the spec leaves it unspecified.
#include <cub/block/block_scan.cuh>
#include <cstdint>

#include "opgen/cuda_status.h"
#include "opgen_ops/moe_align_block_size.h"

namespace opgen_ops::moe_align_block_size {
namespace {

constexpr int kThreads = 256;
constexpr int kScanThreads = 1024;

template <typename I>
__global__ void count_and_pad(Args<I> args, int64_t entries, int64_t size) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < size; i += stride) {
    if (i < entries && args.topk_ids_in_range(args.topk_ids[i])) {
      atomicAdd(args.expert_counts + args.topk_ids[i], 1);
    }
    args.sorted_token_ids[i] = static_cast<int32_t>(entries);
  }
}

template <typename I>
__global__ void __launch_bounds__(kScanThreads) offsets(Args<I> args) {
  using Scan = cub::BlockScan<int32_t, kScanThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int32_t block = static_cast<int32_t>(args.block_size);
  int32_t carry = 0;  // the padded total of the experts before this round
  for (int64_t first = 0; first < args.num_experts; first += kScanThreads) {
    const int64_t e = first + threadIdx.x;
    const int32_t count = e < args.num_experts ? args.expert_counts[e] : 0;
    const int32_t padded = (count + block - 1) / block * block;
    int32_t offset, round_total;
    Scan(scan).ExclusiveSum(padded, offset, round_total);
    offset += carry;
    if (e < args.num_experts) {
      args.expert_counts[e] = offset;
      for (int32_t b = offset / block; b < (offset + padded) / block; ++b) args.expert_ids[b] = static_cast<int32_t>(e);
    }
    carry += round_total;
    __syncthreads();  // the scan's storage is reused by the next round
  }
  if (threadIdx.x == 0) args.num_tokens_post_pad[0] = carry;
  for (int64_t b = carry / block + threadIdx.x; b < args.expert_ids_dim(0); b += kScanThreads) args.expert_ids[b] = -1;
}

template <typename I>
__global__ void place(Args<I> args, int64_t entries) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < entries; i += stride) {
    const I e = args.topk_ids[i];
    if (args.topk_ids_in_range(e)) args.sorted_token_ids[atomicAdd(args.expert_counts + e, 1)] = static_cast<int32_t>(i);
  }
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);  // the kernels loop over the rest
}

}  // namespace

template <typename I>
opgen::Status launch_cuda(cudaStream_t stream, const Args<I>& args) {
  const int64_t entries = args.N * args.K, size = args.sorted_token_ids_dim(0);
  opgen::Status zeroed = opgen::cuda_status(
      cudaMemsetAsync(args.expert_counts, 0, sizeof(int32_t) * args.num_experts, stream),
      "moe_align_block_size: cudaMemsetAsync");
  if (!zeroed.ok()) return zeroed;
  if (size > 0) {
    count_and_pad<I><<<grid_for(size), kThreads, 0, stream>>>(args, entries, size);
    opgen::Status counted = opgen::cuda_launch_status("moe_align_block_size count_and_pad");
    if (!counted.ok()) return counted;
  }
  offsets<I><<<1, kScanThreads, 0, stream>>>(args);
  opgen::Status laid_out = opgen::cuda_launch_status("moe_align_block_size offsets");
  if (!laid_out.ok() || entries == 0) return laid_out;
  place<I><<<grid_for(entries), kThreads, 0, stream>>>(args, entries);
  return opgen::cuda_launch_status("moe_align_block_size place");
}

}  // namespace opgen_ops::moe_align_block_size
