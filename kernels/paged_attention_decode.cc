// CPU body of paged_attention_decode, the reference for the CUDA body: head by
// head, the logits of every context token, a softmax and the weighted sum of
// the values, in double. The workspace is the CUDA body's; it is not used here.
// The caches hold K / k_scale and V / v_scale (kv_cache_dtype's fp8, say):
// each element is read as C holds it and the scales applied after the sums.
#include <cmath>
#include <limits>
#include <vector>

#include "opgen/elementwise.h"
#include "opgen_ops/paged_attention_decode.h"

namespace opgen_ops::paged_attention_decode {
namespace {

// The row of `cache` that holds token t of sequence s for kv head kvh, or
// nullptr where the sequence's block table names a block outside the cache.
template <typename T, typename C>
const C* token_row(const C* cache, int64_t s, int64_t t, int64_t kvh, const Args<T, C>& args) {
  const int64_t block = args.block_tables[s * args.MB + t / args.BS];
  if (!args.block_tables_in_range(block)) return nullptr;
  return cache + ((block * args.BS + t % args.BS) * args.KVH + kvh) * args.Dh;
}

template <typename T>
void fill(T* head, int64_t n, double v) {
  for (int64_t d = 0; d < n; ++d) opgen::kernels::store(head, d, static_cast<float>(v));
}

}  // namespace

template <typename T, typename C>
opgen::Status run_cpu(const Args<T, C>& args) {
  using opgen::kernels::load;
  const int64_t group = args.H / args.KVH;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double k_scale = args.k_scale ? *args.k_scale : 1.0, v_scale = args.v_scale ? *args.v_scale : 1.0;
  std::vector<double> logits, acc(args.Dh);
  for (int64_t s = 0; s < args.S; ++s) {
    const int64_t context = args.context_lens[s];
    for (int64_t h = 0; h < args.H; ++h) {
      T* out = args.out + (s * args.H + h) * args.Dh;
      if (!args.context_lens_in_range(context)) {
        fill(out, args.Dh, nan);
        continue;
      }
      const T* q = args.query + s * args.query_strides[0] + h * args.query_strides[1];
      logits.assign(context, 0.0);
      bool bad_block = false;
      double largest = -std::numeric_limits<double>::infinity();
      for (int64_t t = 0; t < context && !bad_block; ++t) {
        const C* k = token_row(args.key_cache, s, t, h / group, args);
        if (!k) {
          bad_block = true;
          break;
        }
        double dot = 0.0;
        for (int64_t d = 0; d < args.Dh; ++d) dot += static_cast<double>(load(q, d)) * load(k, d);
        logits[t] = dot * k_scale * args.scale;
        largest = std::max(largest, logits[t]);
      }
      if (bad_block) {
        fill(out, args.Dh, nan);
        continue;
      }
      double sum = 0.0;
      acc.assign(args.Dh, 0.0);
      for (int64_t t = 0; t < context; ++t) {
        const double p = std::exp(logits[t] - largest);
        sum += p;
        const C* v = token_row(args.value_cache, s, t, h / group, args);
        for (int64_t d = 0; d < args.Dh; ++d) acc[d] += p * load(v, d);
      }
      for (int64_t d = 0; d < args.Dh; ++d) {
        opgen::kernels::store(out, d, static_cast<float>(context ? acc[d] / sum * v_scale : 0.0));
      }
    }
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::paged_attention_decode
