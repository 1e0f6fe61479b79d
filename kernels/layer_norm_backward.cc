// CPU body of layer_norm_backward, the reference for its CUDA body: the one reference it
// shares with rms_norm_backward (kernels/norm_backward.h), with the mean.
#include "norm_backward.h"
#include "opgen_ops/layer_norm_backward.h"

namespace opgen_ops::layer_norm_backward {

template <typename T, typename S>
opgen::Status run_cpu(const Args<T, S>& args) {
  opgen_kernels::norm_backward::run_cpu</*kCentred=*/true>(args);
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::layer_norm_backward
