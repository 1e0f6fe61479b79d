// CPU body of rotary_embedding, the reference for the CUDA body (rotation.h).
#include "opgen_ops/rotary_embedding.h"
#include "rotation.h"

namespace opgen_ops::rotary_embedding {

template <typename T, typename I>
opgen::Status run_cpu(const Args<T, I>& args) {
  rotation::rotate_tokens(args, /*inverse=*/false);
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::rotary_embedding
