// CPU body of axpby.
#include "my_ops/axpby.h"
#include "opgen/elementwise.h"

namespace my_ops::axpby {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  for (int64_t i = 0; i < args.batch; ++i) {
    store(args.out, i, args.alpha * load(args.x, i) + args.beta * load(args.y, i));
  }
  return opgen::Status::Ok();
}

}  // namespace my_ops::axpby
