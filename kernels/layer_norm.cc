// CPU body of layer_norm, the reference for the CUDA body: one row at a time,
// the mean and then the variance (of the deviations from it) accumulated in
// double, the output computed in float (double for f64). weight and bias are
// optional (null).
#include <cmath>
#include <type_traits>

#include "opgen/elementwise.h"
#include "opgen_ops/layer_norm.h"

namespace opgen_ops::layer_norm {

template <typename T, typename S>
opgen::Status run_cpu(const Args<T, S>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  using C = typename opgen::kernels::Compute<T>::type;
  const int64_t d = args.D;
  for (int64_t row = 0; row < args.batch; ++row) {
    const T* x = args.x + row * d;
    T* out = args.out + row * d;
    double mean = 0.0, squares = 0.0;
    for (int64_t i = 0; i < d; ++i) mean += load(x, i);
    mean /= double(d);
    for (int64_t i = 0; i < d; ++i) {
      const double v = load(x, i) - mean;
      squares += v * v;
    }
    const double rstd = 1.0 / std::sqrt(squares / double(d) + args.eps);
    for (int64_t i = 0; i < d; ++i) {
      const C scaled = static_cast<C>((load(x, i) - mean) * rstd) * (args.weight ? load(args.weight, i) : C(1));
      store(out, i, args.bias ? scaled + load(args.bias, i) : scaled);
    }
    if (args.mean) args.mean[row] = static_cast<S>(mean);
    if (args.rstd) args.rstd[row] = static_cast<S>(rstd);
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::layer_norm
