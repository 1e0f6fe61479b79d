// Checks shared by every generated PyTorch kernel, written against the
// LibTorch stable ABI (torch >= 2.9: torch/csrc/stable), so that one build of
// the package serves several torch versions. A failed check throws
// std::runtime_error, which PyTorch raises as RuntimeError with this text.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "opgen/shape_check.h"
#include "opgen/status.h"

namespace opgen::torch_stable {

using torch::stable::Tensor;

[[noreturn]] inline void fail(const std::string& message) { throw std::runtime_error(message); }

inline std::vector<int64_t> sizes(const Tensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.dim()));
  for (int64_t i = 0; i < t.dim(); ++i) out[i] = t.size(i);
  return out;
}

inline std::string device_text(const Tensor& t) {
  return t.is_cuda() ? "cuda:" + std::to_string(t.get_device_index()) : t.is_cpu() ? "cpu" : "another device";
}

// The checks every tensor argument gets before a kernel body sees it:
// defined, dtype, device (the one of the first input), dense layout, rank.
inline void check_tensor(const char* op, const char* role, const char* name, const Tensor& t,
                         torch::headeronly::ScalarType dtype, const char* dtype_name,
                         const Tensor& first, const char* first_name, int64_t rank,
                         const char* declared) {
  const std::string who = std::string(op) + ": " + role + " '" + name + "'";
  if (!t.defined()) fail(who + " is an undefined tensor");
  if (t.scalar_type() != dtype) {
    fail(who + " has the wrong dtype; the spec declares " + dtype_name +
         " (convert it explicitly, e.g. x.to(torch." + dtype_name + "))");
  }
  if (t.is_cuda() != first.is_cuda() || t.is_cpu() != first.is_cpu() ||
      (t.is_cuda() && t.get_device_index() != first.get_device_index())) {
    fail(who + " is on " + device_text(t) + ", but input '" + first_name + "' is on " +
         device_text(first) + "; all tensors of one call must be on one device");
  }
  if (t.dim() != rank) {
    const std::vector<int64_t> dims = sizes(t);
    fail(opgen::rank_mismatch(op, role, name, dims.data(), dims.size(), declared));
  }
  if (!t.is_contiguous()) {
    fail(who + " is not contiguous; the kernel reads dense row-major memory (call .contiguous())");
  }
}

inline void check_dim(const char* op, const char* role, const char* name, const Tensor& t,
                      int64_t axis, int64_t expected, const char* because, const char* declared) {
  if (t.size(axis) != expected) {
    const std::vector<int64_t> dims = sizes(t);
    fail(opgen::dim_mismatch(op, role, name, dims.data(), dims.size(), static_cast<size_t>(axis),
                             expected, because, declared));
  }
}

// Results of a kernel body as a RuntimeError.
inline void check_status(const Status& s) {
  if (!s.ok()) fail(s.message());
}

#ifdef USE_CUDA
// The caller's current stream on the tensor's device: kernels must launch
// there (torch.compile's CUDA graphs and user streams depend on it).
inline void* current_cuda_stream(const Tensor& t) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream));
  return stream;
}
#endif

}  // namespace opgen::torch_stable
