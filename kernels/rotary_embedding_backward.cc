// CPU body of rotary_embedding_backward: the rotation by the opposite angles
// (rotation.h), the reference for the CUDA body.
#include "opgen_ops/rotary_embedding_backward.h"
#include "rotation.h"

namespace opgen_ops::rotary_embedding_backward {

template <typename T, typename I>
opgen::Status run_cpu(const Args<T, I>& args) {
  rotation::rotate_tokens(args, /*inverse=*/true);
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::rotary_embedding_backward
