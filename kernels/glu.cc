// CPU body of glu: out[r, i] = x[r, i] * sigmoid(x[r, i + D/2]).
#include <cmath>

#include "opgen/elementwise.h"
#include "opgen_ops/glu.h"

namespace opgen_ops::glu {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  using C = typename opgen::kernels::Compute<T>::type;
  const int64_t half = args.D / 2;
  for (int64_t row = 0; row < args.batch; ++row) {
    const T* x = args.x + row * args.D;
    for (int64_t i = 0; i < half; ++i) {
      const C gate = load(x, i + half);
      store(args.out, row * half + i, load(x, i) / (C(1) + std::exp(-gate)));
    }
  }
  return opgen::Status::Ok();
}

OPGEN_GLU_INSTANTIATE_CPU

}  // namespace opgen_ops::glu
