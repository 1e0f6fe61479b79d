// CPU body of glu_backward: element by element, the two halves of grad_x.
#include "glu_gate.h"
#include "opgen_ops/glu_backward.h"

namespace opgen_ops::glu_backward {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  for (int64_t row = 0; row < args.batch; ++row) {
    const T* x = args.x + row * args.D;
    const T* g = args.grad_out + row * args.grad_out_strides[0];
    T* dx = args.grad_x + row * args.D;
    for (int64_t i = 0; i < args.H; ++i) {
      const auto gi = load(g, i * args.grad_out_strides[1]), a = load(x, i), b = load(x, i + args.H);
      store(dx, i, gi * glu_gate::gate(args.activation, b));
      store(dx, i + args.H, gi * a * glu_gate::gate_derivative(args.activation, b));
    }
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::glu_backward
