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

// Makes `device` the CUDA runtime's current device while it lives, when it
// is not already (the common case costs one query), as torch's CUDA guard
// does; status() says whether that worked. The PyTorch entry points use it
// rather than torch's own guard, which follows torch's current accelerator:
// another backend once one registers PrivateUse1 (torchax does).
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int device) : status_(enter(device, &previous_)) {}
  ~CudaDeviceScope() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);  // back to the caller's, which was valid
  }
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;
  const Status& status() const { return status_; }

 private:
  // Makes `device` current; `*previous`: the device to restore, where it changed.
  static Status enter(int device, int* previous) {
    int current = -1;
    if (Status s = cuda_status(cudaGetDevice(&current), "cudaGetDevice"); !s.ok() || current == device) return s;
    Status s = cuda_status(cudaSetDevice(device), "cudaSetDevice");
    if (s.ok()) *previous = current;
    return s;
  }

  int previous_ = -1;  // the device to restore; -1: none was changed (set before status_, by enter)
  Status status_;
};

}  // namespace opgen
