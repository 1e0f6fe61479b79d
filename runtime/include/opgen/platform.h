// Where a kernel body runs. Each binding is written once over a Platform;
// its CPU and CUDA entry points differ only in the Platform they pass:
//
//   platform.run(args)               the op's run_cpu(args) or launch_cuda(stream, args)
//   platform.copy(dst, src, bytes)   the copy behind an output that aliases an input
//
// run() finds the op's body by argument-dependent lookup on its Args type
// (namespace opgen is searched too, for Args<opgen::f16>: it must never
// declare a run_cpu or launch_cuda of its own).
#pragma once

#include <cstddef>
#include <cstring>

#include "opgen/status.h"
#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
#include "opgen/cuda_status.h"
#endif

namespace opgen {

// XLA gives an output that aliases an input the input's own buffer, and the
// body updates it in place. Where a runtime does not (torch_xla's custom call
// has no aliasing), the binding first copies the input into the output, so
// the body always finds the input's contents there.
struct Cpu {
  template <typename A>
  Status run(const A& args) const {
    return run_cpu(args);
  }
  Status copy(void* dst, const void* src, size_t bytes) const {
    if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
};

#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
// Work is enqueued on `stream`: the copy before the body's kernels.
struct Cuda {
  cudaStream_t stream;

  template <typename A>
  Status run(const A& args) const {
    return launch_cuda(stream, args);
  }
  Status copy(void* dst, const void* src, size_t bytes) const {
    if (dst == src || bytes == 0) return Status::Ok();
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
                       "cudaMemcpyAsync (aliased output)");
  }
};
#endif

}  // namespace opgen
