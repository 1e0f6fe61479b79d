// CPU body of rms_norm_dynamic_per_token_quant, the reference for the CUDA
// body: row by row, the sum x + residual in f32 (kept unrounded for the norm,
// stored rounded to T), its squares summed in double, the normalised row
// (rms_norm_quant.h), its max |y| and scale, and each value quantised
// (quant8.h).
#include <cmath>
#include <vector>

#include "opgen/elementwise.h"
#include "opgen_ops/rms_norm_dynamic_per_token_quant.h"
#include "quant8.h"
#include "rms_norm_quant.h"

namespace opgen_ops::rms_norm_dynamic_per_token_quant {

template <typename T, typename Q>
opgen::Status run_cpu(const Args<T, Q>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  const int64_t d = args.D;
  std::vector<float> s(static_cast<size_t>(d));  // the row's sum, then its normalised values
  for (int64_t row = 0; row < args.batch; ++row) {
    const T* x = args.x + row * args.x_strides[0];
    T* residual = args.residual_out != nullptr ? args.residual_out + row * d : nullptr;
    double squares = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      s[i] = residual != nullptr ? load(x, i) + load(residual, i) : load(x, i);
      if (residual != nullptr) store(residual, i, s[i]);
      squares += static_cast<double>(s[i]) * s[i];
    }
    const float rstd = rms_norm_quant::rstd_of(squares, d, args.eps);
    float amax = 0.0f;
    for (int64_t i = 0; i < d; ++i) {
      s[i] = rms_norm_quant::normalized<T>(s[i], rstd, load(args.weight, i));
      amax = std::fmax(amax, std::fabs(s[i]));  // ignores a NaN, as the CUDA body's reduction does
    }
    const float scale = quant8::row_scale<Q>(amax, args.scale_ub);
    args.scale[row] = scale;
    for (int64_t i = 0; i < d; ++i) args.out[row * d + i] = quant8::quantized<Q>(s[i], scale);
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::rms_norm_dynamic_per_token_quant
