// CPU body of softmax, the reference for the CUDA body: one row at a time in
// double, the row's maximum subtracted before exp. A row that is all -inf
// gives NaN (-inf - -inf), as torch.softmax does; fmax ignores a NaN, whose
// exp then makes the row's sum, and so the whole row, NaN.
#include <cmath>
#include <limits>

#include "opgen/elementwise.h"
#include "opgen_ops/softmax.h"

namespace opgen_ops::softmax {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  using C = typename opgen::kernels::Compute<T>::type;
  for (int64_t row = 0; row < args.batch; ++row) {
    const T* x = args.x + row * args.D;
    T* out = args.out + row * args.D;
    double top = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < args.D; ++i) top = std::fmax(top, static_cast<double>(load(x, i)));
    double sum = 0.0;
    for (int64_t i = 0; i < args.D; ++i) sum += std::exp(static_cast<double>(load(x, i)) - top);
    for (int64_t i = 0; i < args.D; ++i) {
      store(out, i, static_cast<C>(std::exp(static_cast<double>(load(x, i)) - top) / sum));
    }
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::softmax
