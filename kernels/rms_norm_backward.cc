// CPU body of rms_norm_backward, the reference for the CUDA body: row by row
// in double, then the column sums. The workspace is the CUDA body's.
#include <cmath>
#include <vector>

#include "opgen/elementwise.h"
#include "opgen_ops/rms_norm_backward.h"

namespace opgen_ops::rms_norm_backward {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  const int64_t d = args.D;
  std::vector<double> grad_weight(d, 0.0), grad_bias(d, 0.0);
  for (int64_t row = 0; row < args.batch; ++row) {
    const T* x = args.x + row * d;
    const T* g = args.grad_out + row * args.grad_out_strides[0];
    const int64_t gs = args.grad_out_strides[1];
    double squares = 0.0, dot = 0.0;  // sum x^2, sum (g * w) * x
    for (int64_t i = 0; i < d; ++i) {
      const double xi = load(x, i), gw = load(g, i * gs) * (args.weight ? double(load(args.weight, i)) : 1.0);
      squares += xi * xi;
      dot += gw * xi;
    }
    const double rstd = 1.0 / std::sqrt(squares / double(d) + args.eps);
    const double mean_gn = dot * rstd / double(d);  // mean(g * w * n)
    for (int64_t i = 0; i < d; ++i) {
      const double xi = load(x, i), gi = load(g, i * gs), n = xi * rstd;
      const double gw = gi * (args.weight ? double(load(args.weight, i)) : 1.0);
      const double residual = args.grad_residual ? double(load(args.grad_residual, row * args.grad_residual_strides[0] +
                                                                                   i * args.grad_residual_strides[1]))
                                                 : 0.0;
      store(args.grad_x + row * d, i,
            static_cast<typename opgen::kernels::Compute<T>::type>(rstd * (gw - n * mean_gn) + residual));
      grad_weight[i] += gi * n;
      grad_bias[i] += gi;
    }
  }
  for (int64_t i = 0; i < d; ++i) {
    store(args.grad_weight, i, static_cast<typename opgen::kernels::Compute<T>::type>(grad_weight[i]));
    store(args.grad_bias, i, static_cast<typename opgen::kernels::Compute<T>::type>(grad_bias[i]));
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::rms_norm_backward
