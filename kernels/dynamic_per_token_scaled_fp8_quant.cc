// CPU body of dynamic_per_token_scaled_fp8_quant, the reference for the CUDA
// body: a row at a time, the max |x| and the scale in S (float; double for
// f64 input), each element divided by the scale and converted to Q, ties to
// even, saturated (fp8_quant.h).
#include <algorithm>
#include <cmath>

#include "fp8_quant.h"
#include "opgen/elementwise.h"
#include "opgen_ops/dynamic_per_token_scaled_fp8_quant.h"

namespace opgen_ops::dynamic_per_token_scaled_fp8_quant {

template <typename T, typename S, typename Q>
opgen::Status run_cpu(const Args<T, S, Q>& args) {
  using opgen::kernels::load;
  for (int64_t row = 0; row < args.batch; ++row) {
    const T* x = args.x + row * args.D;
    S amax = 0;
    // fmax ignores a NaN, as the CUDA body's reduction does.
    for (int64_t i = 0; i < args.D; ++i) amax = std::fmax(amax, std::fabs(static_cast<S>(load(x, i))));
    if (args.scale_ub != nullptr) amax = std::fmin(amax, *args.scale_ub);
    const S scale = std::max(amax / static_cast<S>(Fp8<Q>::kMax), min_scale<Q, S>());
    args.scale[row] = scale;
    for (int64_t i = 0; i < args.D; ++i) {
      args.out[row * args.D + i].bits = to_fp8<Q>(static_cast<S>(load(x, i)) / scale);
    }
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::dynamic_per_token_scaled_fp8_quant
