// CUDA body of rotary_embedding_backward: rotation.cuh, by the opposite angles.
#include "opgen_ops/rotary_embedding_backward.h"
#include "rotation.cuh"

namespace opgen_ops::rotary_embedding_backward {

template <typename T, typename I>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T, I>& args) {
  return rotation::launch_rotation(stream, args, /*inverse=*/true, "rotary_embedding_backward");
}

}  // namespace opgen_ops::rotary_embedding_backward
