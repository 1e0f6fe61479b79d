// CPU body of glu: out[r, i] = x[r, i] * act(x[r, i + D/2]).
#include "glu_gate.h"
#include "opgen/elementwise.h"
#include "opgen_ops/glu.h"

namespace opgen_ops::glu {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  const int64_t half = args.D / 2;
  for (int64_t row = 0; row < args.batch; ++row) {
    const T* x = args.x + row * args.D;
    for (int64_t i = 0; i < half; ++i) {
      store(args.out, row * half + i, load(x, i) * glu_gate::gate(args.activation, load(x, i + half)));
    }
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::glu
