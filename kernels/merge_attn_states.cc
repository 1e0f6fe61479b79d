// CPU body of merge_attn_states, the reference for the CUDA body: one
// (token, head) row at a time, the weights and the sums in double, stored in T.
#include <cmath>
#include <limits>

#include "opgen/elementwise.h"
#include "opgen_ops/merge_attn_states.h"

namespace opgen_ops::merge_attn_states {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  const int64_t n_tokens = args.N, heads = args.H, d = args.D;
  for (int64_t n = 0; n < n_tokens; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t row = (n * heads + h) * d, at = h * n_tokens + n;  // lse is [H, N]
      // +inf means an empty part (FlashAttention 2's answer for one), as -inf does.
      double p = args.prefix_lse[at], s = args.suffix_lse[at];
      if (p == -kMinusInf) p = kMinusInf;
      if (s == -kMinusInf) s = kMinusInf;
      const double m = std::fmax(p, s);
      if (m == kMinusInf) {  // neither part saw a key: the prefix's output as it is
        for (int64_t i = 0; i < d; ++i) args.output[row + i] = args.prefix_output[row + i];
        if (args.output_lse) args.output_lse[at] = static_cast<float>(m);
        continue;
      }
      const double a = std::exp(p - m), b = std::exp(s - m), sum = a + b;
      const double wa = a / sum, wb = b / sum;
      for (int64_t i = 0; i < d; ++i) {
        const double v = wa * load(args.prefix_output, row + i) + wb * load(args.suffix_output, row + i);
        store(args.output, row + i, static_cast<float>(v));
      }
      if (args.output_lse) args.output_lse[at] = static_cast<float>(std::log(sum) + m);
    }
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::merge_attn_states
