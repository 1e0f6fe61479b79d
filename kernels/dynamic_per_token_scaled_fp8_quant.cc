// CPU body of dynamic_per_token_scaled_fp8_quant, the reference for the CUDA
// body: a row at a time, the max |x| and the scale in S (float; double for
// f64 input), each element divided by the scale and converted to Q, ties to
// even, saturated (quant8.h).
#include <cmath>

#include "opgen/elementwise.h"
#include "opgen_ops/dynamic_per_token_scaled_fp8_quant.h"
#include "quant8.h"

namespace opgen_ops::dynamic_per_token_scaled_fp8_quant {

template <typename T, typename S, typename Q>
opgen::Status run_cpu(const Args<T, S, Q>& args) {
  using opgen::kernels::load;
  for (int64_t row = 0; row < args.batch; ++row) {
    const T* x = args.x + row * args.D;
    S amax = 0;
    // fmax ignores a NaN, as the CUDA body's reduction does.
    for (int64_t i = 0; i < args.D; ++i) amax = std::fmax(amax, std::fabs(static_cast<S>(load(x, i))));
    const S scale = quant8::row_scale<Q>(amax, args.scale_ub);
    args.scale[row] = scale;
    for (int64_t i = 0; i < args.D; ++i) {
      args.out[row * args.D + i] = quant8::quantized<Q>(static_cast<S>(load(x, i)), scale);
    }
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::dynamic_per_token_scaled_fp8_quant
