// CUDA errors as opgen::Status, for kernel bodies:
//
//   my_kernel<<<grid, block, 0, stream>>>(...);
//   return opgen::cuda_launch_status("my_kernel");
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "opgen/status.h"

namespace opgen {

inline Status cuda_status(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorName(error) + " (" +
                          cudaGetErrorString(error) + ")");
}

// The error, if any, of the last launch on this thread.
inline Status cuda_launch_status(const char* kernel) {
  return cuda_status(cudaGetLastError(), kernel);
}

}  // namespace opgen
