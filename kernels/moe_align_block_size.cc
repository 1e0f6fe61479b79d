// CPU body of moe_align_block_size, the reference for the CUDA body: counts
// each expert's entries, lays the groups out at their padded offsets, and
// places each expert's entries in index order (the CUDA body's order is the
// atomics', which the spec leaves unspecified).
#include <cstdint>
#include <vector>

#include "opgen_ops/moe_align_block_size.h"

namespace opgen_ops::moe_align_block_size {

template <typename I>
opgen::Status run_cpu(const Args<I>& args) {
  const int64_t entries = args.N * args.K, experts = args.num_experts, block = args.block_size;
  std::vector<int64_t> next(experts, 0);  // a count, then the next free slot of each expert's group
  for (int64_t i = 0; i < entries; ++i) {
    if (args.topk_ids_in_range(args.topk_ids[i])) ++next[args.topk_ids[i]];
  }
  const int64_t size = args.sorted_token_ids_dim(0), blocks = args.expert_ids_dim(0);
  for (int64_t j = 0; j < size; ++j) args.sorted_token_ids[j] = static_cast<int32_t>(entries);
  for (int64_t b = 0; b < blocks; ++b) args.expert_ids[b] = -1;
  int64_t offset = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t padded = (next[e] + block - 1) / block * block;
    for (int64_t b = offset / block; b < (offset + padded) / block; ++b) args.expert_ids[b] = static_cast<int32_t>(e);
    next[e] = offset;
    offset += padded;
  }
  args.num_tokens_post_pad[0] = static_cast<int32_t>(offset);
  for (int64_t i = 0; i < entries; ++i) {
    const I e = args.topk_ids[i];
    if (args.topk_ids_in_range(e)) args.sorted_token_ids[next[e]++] = static_cast<int32_t>(i);
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::moe_align_block_size
