// The CPU reference of rms_norm_backward and layer_norm_backward, as
// kernels/norm_backward.cuh is their CUDA body: row by row in double (centred
// by the row's mean for layer_norm, in a pass of its own), then the column
// sums. layer_norm_backward takes the forward's mean and rstd where it is
// given them (each one not given is recomputed). The workspaces are the CUDA
// body's.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "opgen/elementwise.h"

namespace opgen_kernels::norm_backward {

template <bool kCentred, typename A>
void run_cpu(const A& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  using C = opgen::kernels::ComputeOf<decltype(A::x)>;
  const int64_t d = args.D;
  const int64_t gs = args.grad_out_strides[1];
  std::vector<double> grad_weight(d, 0.0), grad_bias(d, 0.0);
  for (int64_t row = 0; row < args.batch; ++row) {
    const auto* x = args.x + row * d;
    const auto* g = args.grad_out + row * args.grad_out_strides[0];
    auto gw = [&](int64_t i) { return double(load(g, i * gs)) * (args.weight ? double(load(args.weight, i)) : 1.0); };
    double mean = 0.0;
    if constexpr (kCentred) {
      if (args.mean) {
        mean = double(args.mean[row]);
      } else {
        for (int64_t i = 0; i < d; ++i) mean += load(x, i);
        mean /= double(d);
      }
    }
    double squares = 0.0, dot = 0.0, g_sum = 0.0;  // sum (x - m)^2, sum g * w * (x - m), sum g * w
    for (int64_t i = 0; i < d; ++i) {
      const double xi = load(x, i) - mean, gwi = gw(i);
      squares += xi * xi;
      dot += gwi * xi;
      g_sum += gwi;
    }
    double rstd = 1.0 / std::sqrt(squares / double(d) + args.eps);
    if constexpr (kCentred) {
      if (args.rstd) rstd = double(args.rstd[row]);
    }
    const double mean_gn = dot * rstd / double(d);  // mean(g * w * n)
    const double mean_g = kCentred ? g_sum / double(d) : 0.0;
    for (int64_t i = 0; i < d; ++i) {
      const double n = (load(x, i) - mean) * rstd, gi = load(g, i * gs);
      const double residual = args.grad_residual ? double(load(args.grad_residual, row * args.grad_residual_strides[0] +
                                                                                   i * args.grad_residual_strides[1]))
                                                 : 0.0;
      store(args.grad_x + row * d, i, static_cast<C>(rstd * (gw(i) - mean_g - n * mean_gn) + residual));
      grad_weight[i] += gi * n;
      grad_bias[i] += gi;
    }
  }
  for (int64_t i = 0; i < d; ++i) {
    store(args.grad_weight, i, static_cast<C>(grad_weight[i]));
    store(args.grad_bias, i, static_cast<C>(grad_bias[i]));
  }
}

}  // namespace opgen_kernels::norm_backward
