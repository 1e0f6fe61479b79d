// CUDA body of layer_norm_backward: the one implementation it shares with
// rms_norm_backward (kernels/norm_backward.cuh), with the mean.
#include "norm_backward.cuh"
#include "opgen_ops/layer_norm_backward.h"

namespace opgen_ops::layer_norm_backward {

template <typename T, typename S>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T, S>& args) {
  return opgen_kernels::norm_backward::launch</*kCentred=*/true>(stream, args, "layer_norm_backward");
}

}  // namespace opgen_ops::layer_norm_backward
