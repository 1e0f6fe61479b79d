// CPU body of topk_softmax, the reference for the CUDA body: one row at a
// time in float. The softmax subtracts the row's maximum before exp; the top
// k are chosen on the logits (softmax keeps their order), by the order the
// spec states: larger first, the lower index first among equals, a NaN as
// -inf (it makes the row's sum, and so every weight, NaN).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "opgen/elementwise.h"
#include "opgen_ops/topk_softmax.h"

namespace opgen_ops::topk_softmax {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  using opgen::kernels::load;
  const int64_t E = args.E, k = args.topk;
  std::vector<float> key(E);
  std::vector<int32_t> order(E);
  for (int64_t row = 0; row < args.N; ++row) {
    const T* x = args.gating_output + row * E;
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t e = 0; e < E; ++e) {
      const float v = load(x, e);
      key[e] = std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
      top = std::fmax(top, v);
    }
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<float>(load(x, e)) - top);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return key[a] > key[b] || (key[a] == key[b] && a < b);
    });
    float* weights = args.topk_weights + row * k;
    int32_t* indices = args.topk_indices + row * k;
    float chosen = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      indices[j] = order[j];
      weights[j] = std::exp(static_cast<float>(load(x, order[j])) - top) / sum;
      chosen += weights[j];
    }
    if (args.renormalize) {
      for (int64_t j = 0; j < k; ++j) weights[j] /= chosen;
    }
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::topk_softmax
