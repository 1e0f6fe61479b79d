// CPU body of softmax_backward, the reference for the CUDA body: one row at a
// time in double, grad_x = out * (grad_out - sum(grad_out * out)).
#include "opgen/elementwise.h"
#include "opgen_ops/softmax_backward.h"

namespace opgen_ops::softmax_backward {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  using C = typename opgen::kernels::Compute<T>::type;
  const int64_t gs = args.grad_out_strides[1];
  for (int64_t row = 0; row < args.batch; ++row) {
    const T* g = args.grad_out + row * args.grad_out_strides[0];
    const T* out = args.out + row * args.D;
    T* dx = args.grad_x + row * args.D;
    double dot = 0.0;
    for (int64_t i = 0; i < args.D; ++i) dot += static_cast<double>(load(g, i * gs)) * load(out, i);
    for (int64_t i = 0; i < args.D; ++i) {
      store(dx, i, static_cast<C>(static_cast<double>(load(out, i)) * (load(g, i * gs) - dot)));
    }
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::softmax_backward
