// CPU body of rms_norm, the reference for the CUDA body: one row at a time,
// the mean square accumulated in double.
#include <cmath>

#include "opgen/elementwise.h"
#include "opgen_ops/rms_norm.h"

namespace opgen_ops::rms_norm {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  for (int64_t row = 0; row < args.batch; ++row) {
    const T* x = args.x + row * args.D;
    T* out = args.out + row * args.D;
    double sum = 0.0;
    for (int64_t i = 0; i < args.D; ++i) {
      const double v = load(x, i);
      sum += v * v;
    }
    const float rstd = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(args.D) + args.eps));
    for (int64_t i = 0; i < args.D; ++i) store(out, i, load(x, i) * rstd * load(args.weight, i));
    args.rstd[row] = rstd;
  }
  return opgen::Status::Ok();
}

OPGEN_RMS_NORM_INSTANTIATE_CPU

}  // namespace opgen_ops::rms_norm
