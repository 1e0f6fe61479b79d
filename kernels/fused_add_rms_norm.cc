// CPU body of fused_add_rms_norm, the reference for the CUDA body: row by row,
// the sum rounded to T as it is stored, then its mean square in double.
#include <cmath>

#include "opgen/elementwise.h"
#include "opgen_ops/fused_add_rms_norm.h"

namespace opgen_ops::fused_add_rms_norm {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  for (int64_t row = 0; row < args.batch; ++row) {
    T* x = args.x_out + row * args.x_strides[0];
    T* residual = args.residual_out + row * args.D;
    double squares = 0.0;
    for (int64_t i = 0; i < args.D; ++i) {
      store(residual, i, load(x, i) + load(residual, i));
      const double r = load(residual, i);
      squares += r * r;
    }
    const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(args.D) + args.eps);
    for (int64_t i = 0; i < args.D; ++i) {
      store(x, i, static_cast<typename opgen::kernels::Compute<T>::type>(load(residual, i) * rstd * load(args.weight, i)));
    }
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::fused_add_rms_norm
