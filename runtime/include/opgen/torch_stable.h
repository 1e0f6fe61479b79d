// PyTorch kernels for every op, written against the LibTorch stable ABI
// (torch >= 2.9: the C shim of torch/csrc/inductor/aoti_torch and
// torch/csrc/stable), so that one build of the package serves several torch
// versions: one boxed kernel template over the op's generated Rules, which
// checks the call with the op's bind() (opgen/binder.h), allocates its
// outputs, and runs its body on the caller's current stream. A bad argument
// throws std::runtime_error, which PyTorch raises as a RuntimeError.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
// torch 2.9's tensor.h defines a member out of line without `inline` (so two
// files that include it cannot be linked together); the class alone is in
// tensor_struct.h, which later versions keep too.
#if __has_include(<torch/csrc/stable/tensor_struct.h>)
#include <torch/csrc/stable/tensor_struct.h>
#else
#include <torch/csrc/stable/tensor.h>
#endif

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "opgen/binder.h"
#include "opgen/device_memory.h"
#include "opgen/run_call.h"
#include "opgen/platform.h"
#include "opgen/shape_check.h"
#include "opgen/status.h"

namespace opgen::torch_stable {

using torch::stable::Tensor;

[[noreturn]] inline void fail(const std::string& message) { throw std::runtime_error(message); }

inline void check_shim(AOTITorchError error, const char* what) {
  if (error != AOTI_TORCH_SUCCESS) fail(std::string("opgen: torch shim call failed: ") + what);
}

// opgen's dtype of a torch dtype code, the torch dtype code of an opgen dtype, and the name
// of a torch dtype opgen does not take.
DType dtype_of(int32_t torch_dtype);
int32_t torch_dtype(DType d);
const char* foreign_name(int32_t torch_dtype);

// The metadata of one tensor argument, read once.
struct TensorView {
  AtenTensorHandle handle = nullptr;
  int32_t dtype = 0;
  int32_t device_type = 0;
  int32_t device_index = 0;
  int64_t dim = 0;
  const int64_t* sizes = nullptr;
  const int64_t* strides = nullptr;
  void* data = nullptr;

  // `op`, `role` and `name` name the argument ("simple_add: input 'a'") in
  // the error that an undefined tensor (None passed for a Tensor) earns.
  TensorView(const Tensor& t, const char* op, const char* role, const char* name);

  bool is_cuda() const { return device_type == aoti_torch_device_type_cuda(); }
  bool is_cpu() const { return device_type == aoti_torch_device_type_cpu(); }
  std::string device_text() const;
};


// What a new tensor is, for the error a refused allocation earns:
// "rms_norm: output 'out'", "paged_attention_decode: workspaces 'a, b, c'".
struct Buffer {
  const char* op;
  const char* role;  // "output", "workspace" or "workspaces"
  const char* const* names;  // `count` of them
  size_t count = 1;
};

// A new dense tensor on the device of `like`.
Tensor empty(const TensorView& like, const int64_t* sizes, int64_t rank, int32_t dtype, const Buffer& buffer,
             void** data);

// Boxed-kernel stack conversions. torch 2.9 has only the global to/from;
// 2.10 moved them to torch::stable::detail and deprecated the global ones,
// which still work in every version this builds against, so they are used
// here, once, with the deprecation silenced.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
template <typename T>
T stack_to(StableIValue v) {
  return to<T>(v);
}
inline StableIValue stack_from(const Tensor& t) { return from(t); }
#pragma GCC diagnostic pop

// A PyTorch call as a Source: the stack holds the inputs (None for an
// omitted optional one), then the attributes, then a bool per output on
// request (return_<name>); every tensor must be on the device of the first
// input. It allocates (Source::allocates): the binder checks an input that an
// output updates in place, and lays out the workspaces in one buffer.
class TorchSource : public Source {
 public:
  static constexpr size_t kMaxInputs = 64;
  // The first `required` inputs are Tensors, the others Tensor? (optional inputs come last).
  TorchSource(const char* op, const char* const* input_names, size_t inputs, size_t required, size_t attrs,
              StableIValue* stack);

  const TensorRef* input(size_t i) override { return i < inputs_ && present_[i] ? &refs_[i] : nullptr; }
  Status attr(size_t i, const char* name, AttrKind kind, AttrValue* value) override;
  Status output(size_t i, const char* name, const char* declared, DType dtype, const int64_t* dims, size_t rank,
                void** data) override;
  // One allocation for all of the call's workspaces (a call of paged_attention_decode has three).
  Status workspace(size_t i, const char* const* names, size_t count, size_t bytes, void** data) override;
  bool requested(size_t k) override { return stack_to<bool>(stack_[inputs_ + attrs_ + k]); }
  Device device() const override { return first_->is_cuda() ? Device::kCuda : Device::kCpu; }
  bool allocates() const override { return true; }
  uint64_t memory() const override { return device_memory(device(), first_->device_index); }
  std::string device_name() const override { return first_->device_text(); }
  Dialect dialect() const override { return Dialect::kTorch; }

  const TensorView& first() const { return *first_; }
  // The outputs that alias no input, for the stack: fresh_count() of them.
  size_t fresh_count() const { return fresh_count_; }
  const Tensor& fresh(size_t i) const { return *fresh_[i]; }

 private:
  const char* op_;
  size_t inputs_;
  size_t attrs_;
  StableIValue* stack_;
  // Fixed arrays, and messages made only on a failure: a call allocates
  // nothing on the heap but its outputs (and an array attribute's or a
  // workspace's place in keep_).
  std::optional<Tensor> tensors_[kMaxInputs];
  std::optional<TensorView> views_[kMaxInputs];
  TensorRef refs_[kMaxInputs];
  bool present_[kMaxInputs] = {};
  const TensorView* first_ = nullptr;
  std::optional<Tensor> fresh_[Binder::kMaxOutputs];
  size_t fresh_count_ = 0;
  std::vector<Tensor> keep_;  // attribute tensors and workspaces, alive until the call returns
};


// The device a boxed kernel is registered for, made from the call's first
// input: it refuses a tensor on another device and gives the opgen::Platform
// the body runs on.
class OnCpu {
 public:
  OnCpu(const char* op, const TensorView& first);
  opgen::Cpu platform() const { return {}; }
};

#if defined(USE_CUDA) && defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
// Also makes the tensors' device current for the call, and launches on the
// caller's current stream there (torch.compile's CUDA graphs and user streams
// depend on it).
class OnCuda {
 public:
  OnCuda(const char* op, const TensorView& first);
  const opgen::Cuda& platform() const { return platform_; }

 private:
  opgen::CudaDeviceScope scope_;
  opgen::Cuda platform_{};
};
#endif

// The boxed kernel of an op on one device: binds the stack with the op's
// rules, runs the body of the selected instantiation, and leaves the outputs
// that alias no input on the stack.
template <typename Rules, typename Device>
void boxed(StableIValue* stack, uint64_t, uint64_t) {
  TorchSource source(Rules::kName, Rules::kInputNames, Rules::kInputs, Rules::kRequiredInputs, Rules::kAttrs, stack);
  const Device device(Rules::kName, source.first());
  Binder b(Rules::kName, source);
  if (Status s = run_call<Rules>(b, device.platform()); !s.ok()) fail(s.message());
  for (size_t i = 0; i < source.fresh_count(); ++i) stack[i] = stack_from(source.fresh(i));
}

}  // namespace opgen::torch_stable
