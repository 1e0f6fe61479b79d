// CPU body of rms_norm, the reference for the CUDA body: one row at a time,
// the mean square accumulated in double, the output computed in float (double
// for f64). weight and bias are optional (null).
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
    using C = typename opgen::kernels::Compute<T>::type;
    const double rstd = 1.0 / std::sqrt(sum / static_cast<double>(args.D) + args.eps);
    for (int64_t i = 0; i < args.D; ++i) {
      const C scaled = load(x, i) * static_cast<C>(rstd) * (args.weight ? load(args.weight, i) : C(1));
      store(out, i, args.bias ? scaled + load(args.bias, i) : scaled);
    }
    args.rstd[row] = static_cast<float>(rstd);
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::rms_norm
