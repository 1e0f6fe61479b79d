// CPU body of simple_add: out = a + alpha * b. The reference the CUDA body is
// tested against, and what the XLA:CPU path runs.
#include "opgen_ops/simple_add.h"

namespace opgen_ops::simple_add {

opgen::Status run_cpu(const Args& args) {
  for (int64_t i = 0; i < args.N; ++i) args.out[i] = args.a[i] + args.alpha * args.b[i];
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::simple_add
