// The copy behind an output that aliases an input (an in-place update). XLA
// gives such an output the input's own buffer, and the body updates it in
// place; where a runtime does not (torch_xla's custom call has no aliasing),
// the binding first copies the input into the output, so the body always
// finds the input's contents there.
#pragma once

#include <cstddef>
#include <cstring>

#include "opgen/status.h"
#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
#include "opgen/cuda_status.h"
#endif

namespace opgen {

inline Status alias_copy_cpu(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
  return Status::Ok();
}

#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
// Enqueued on `stream`, before the body's work.
inline Status alias_copy_cuda(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (dst == src || bytes == 0) return Status::Ok();
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync (aliased output)");
}
#endif

}  // namespace opgen
