// CUDA body of rotary_embedding: rotation.cuh.
#include "opgen_ops/rotary_embedding.h"
#include "rotation.cuh"

namespace opgen_ops::rotary_embedding {

template <typename T, typename I>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T, I>& args) {
  return rotation::launch_rotation(stream, args, /*inverse=*/false, "rotary_embedding");
}

}  // namespace opgen_ops::rotary_embedding
