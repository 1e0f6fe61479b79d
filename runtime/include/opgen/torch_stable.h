// What every generated PyTorch kernel needs, written against the LibTorch
// stable ABI (torch >= 2.9: the C shim of torch/csrc/inductor/aoti_torch and
// torch/csrc/stable), so that one build of the package serves several torch
// versions. It reads each tensor's metadata with a handful of shim calls,
// allocates results with one call (no extra dispatcher round trip), and
// throws std::runtime_error on a bad argument, which PyTorch raises as a
// RuntimeError with the same text.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <vector>

#include "opgen/platform.h"
#include "opgen/shape_check.h"
#include "opgen/span.h"
#include "opgen/status.h"

namespace opgen::torch_stable {

using torch::stable::Tensor;

[[noreturn]] inline void fail(const std::string& message) { throw std::runtime_error(message); }

inline void check_shim(AOTITorchError error, const char* what) {
  if (error != AOTI_TORCH_SUCCESS) fail(std::string("opgen: torch shim call failed: ") + what);
}

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

  // `what` names the argument ("simple_add: input 'a'") in the error that an
  // undefined tensor (None passed for a Tensor) earns.
  TensorView(const Tensor& t, const std::string& what) : handle(t.get()) {
    bool defined = false;
    check_shim(aoti_torch_is_defined(handle, &defined), "is_defined");
    if (!defined) fail(what + " is None (an undefined tensor); it must be a tensor");
    check_shim(aoti_torch_get_dtype(handle, &dtype), "get_dtype");
    check_shim(aoti_torch_get_device_type(handle, &device_type), "get_device_type");
    check_shim(aoti_torch_get_device_index(handle, &device_index), "get_device_index");
    check_shim(aoti_torch_get_dim(handle, &dim), "get_dim");
    int64_t* s = nullptr;
    int64_t* st = nullptr;
    check_shim(aoti_torch_get_sizes(handle, &s), "get_sizes");
    check_shim(aoti_torch_get_strides(handle, &st), "get_strides");
    check_shim(aoti_torch_get_data_ptr(handle, &data), "get_data_ptr");
    sizes = s;
    strides = st;
  }

  int64_t numel() const { return element_count(sizes, static_cast<size_t>(dim)); }

  // The bytes from the first element to one past the last (0 when empty).
  uint64_t byte_extent() const {
    if (numel() == 0) return 0;
    uint64_t last = 0;
    for (int64_t i = 0; i < dim; ++i) last += static_cast<uint64_t>(sizes[i] - 1) * static_cast<uint64_t>(strides[i]);
    return (last + 1) * aoti_torch_dtype_element_size(dtype);
  }
  bool is_cuda() const { return device_type == aoti_torch_device_type_cuda(); }
  bool is_cpu() const { return device_type == aoti_torch_device_type_cpu(); }

  // Dense row-major, as torch's is_contiguous: size-1 dimensions may have any
  // stride, and an empty tensor is contiguous.
  bool is_contiguous() const {
    for (int64_t i = 0; i < dim; ++i) {
      if (sizes[i] == 0) return true;
    }
    int64_t expected = 1;
    for (int64_t i = dim - 1; i >= 0; --i) {
      if (sizes[i] != 1 && strides[i] != expected) return false;
      expected *= sizes[i];
    }
    return true;
  }

  std::string device_text() const {
    return is_cuda() ? "cuda:" + std::to_string(device_index) : is_cpu() ? "cpu" : "another device";
  }
};

// The spelling of a torch dtype code in messages.
inline std::string dtype_text(int32_t dtype) {
  const struct {
    int32_t code;
    const char* name;
  } known[] = {{aoti_torch_dtype_float16(), "float16"}, {aoti_torch_dtype_bfloat16(), "bfloat16"},
               {aoti_torch_dtype_float32(), "float32"}, {aoti_torch_dtype_float64(), "float64"},
               {aoti_torch_dtype_int32(), "int32"},     {aoti_torch_dtype_int64(), "int64"},
               {aoti_torch_dtype_uint8(), "uint8"},     {aoti_torch_dtype_bool(), "bool"}};
  for (const auto& k : known) {
    if (k.code == dtype) return k.name;
  }
  return "another dtype (code " + std::to_string(dtype) + ")";
}

inline void check_dtype(const char* op, const char* name, const TensorView& t, int32_t dtype,
                        const char* dtype_name) {
  if (t.dtype != dtype) {
    fail(std::string(op) + ": input '" + name + "' has dtype " + dtype_text(t.dtype) +
         "; the spec declares " + dtype_name + " (convert it explicitly, e.g. x.to(torch." +
         dtype_name + "))");
  }
}

inline void check_same_dtype(const char* op, const char* name, const TensorView& t, const char* var,
                             const char* bound_by, int32_t bound) {
  if (t.dtype != bound) {
    fail(std::string(op) + ": input '" + name + "' has dtype " + dtype_text(t.dtype) + ", but its dtype " +
         var + " is " + dtype_text(bound) + " (bound by input '" + bound_by + "')");
  }
}

// The checks every tensor argument gets before a kernel body sees it:
// device (the one of the first input), rank, dense layout. With `batch`,
// the tensor has any number of leading dimensions before its `rank` ones.
inline void check_tensor(const char* op, const char* role, const char* name, const TensorView& t,
                         const TensorView& first, const char* first_name, int64_t rank, bool batch,
                         const char* declared) {
  const std::string who = std::string(op) + ": " + role + " '" + name + "'";
  if (t.device_type != first.device_type || t.device_index != first.device_index) {
    fail(who + " is on " + t.device_text() + ", but input '" + first_name + "' is on " +
         first.device_text() + "; all tensors of one call must be on one device");
  }
  if (batch ? t.dim < rank : t.dim != rank) {
    fail(opgen::rank_mismatch(op, role, name, t.sizes, static_cast<size_t>(t.dim), declared));
  }
  if (!t.is_contiguous()) {
    fail(who + " is not contiguous; the kernel reads dense row-major memory (call .contiguous())");
  }
}

// An input that the op updates in place must share no memory with another
// input: the body would read what it is overwriting (torch's own in-place
// ops refuse this too).
inline void check_no_overlap(const char* op, const char* updated, const TensorView& a, const char* other,
                             const TensorView& b) {
  const auto begin_a = reinterpret_cast<uintptr_t>(a.data), begin_b = reinterpret_cast<uintptr_t>(b.data);
  const uint64_t size_a = a.byte_extent(), size_b = b.byte_extent();
  if (size_a == 0 || size_b == 0 || begin_a >= begin_b + size_b || begin_b >= begin_a + size_a) return;
  fail(std::string(op) + ": input '" + other + "' shares memory with input '" + updated +
       "', which the op updates in place; pass a tensor of its own (e.g. " + other + ".clone())");
}

// The leading (batch) dimensions of `t` must equal those of the batch source.
inline void check_batch(const char* op, const char* name, const TensorView& t, int64_t lead,
                        const std::vector<int64_t>& batch, const char* batch_source) {
  if (!opgen::same_dims(t.sizes, static_cast<size_t>(lead), batch.data(), batch.size())) {
    fail(opgen::batch_mismatch(op, "input", name, t.sizes, static_cast<size_t>(t.dim),
                               static_cast<size_t>(lead), batch.data(), batch.size(), batch_source));
  }
}

inline void check_dim(const char* op, const char* role, const char* name, const TensorView& t,
                      int64_t axis, int64_t expected, const char* because, const char* declared) {
  if (t.sizes[axis] != expected) {
    fail(opgen::dim_mismatch(op, role, name, t.sizes, static_cast<size_t>(t.dim),
                             static_cast<size_t>(axis), expected, because, declared));
  }
}

// A new dense tensor of `rank` dimensions on the device of `like`.
inline Tensor empty(const TensorView& like, const int64_t* sizes, int64_t rank, int32_t dtype,
                    void** data, int64_t* numel) {
  int64_t strides[16];
  if (rank > 16) fail("opgen: outputs of more than 16 dimensions are not supported");
  int64_t n = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    strides[i] = n;
    n *= sizes[i];
  }
  AtenTensorHandle out = nullptr;
  check_shim(aoti_torch_empty_strided(rank, sizes, strides, dtype, like.device_type,
                                      like.device_index, &out),
             "empty_strided");
  Tensor t(out);
  check_shim(aoti_torch_get_data_ptr(out, data), "get_data_ptr");
  *numel = n;
  return t;
}

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

// An attribute from the stack (torch passes float as double and int as
// int64), refused when it does not fit the spec's type: torch would
// otherwise narrow it silently (1e40 to inf in f32).
template <typename T>
T attr(const char* op, const char* name, StableIValue v) {
  const std::string who = std::string(op) + ": attribute '" + name + "'";
  if constexpr (std::is_same_v<T, bool>) {
    return stack_to<bool>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    const double d = stack_to<double>(v);
    if (!std::isfinite(d)) fail(who + " = " + std::to_string(d) + " is not finite");
    if (d > static_cast<double>(std::numeric_limits<T>::max()) || d < -static_cast<double>(std::numeric_limits<T>::max())) {
      fail(who + " = " + std::to_string(d) + " does not fit " + (sizeof(T) == 4 ? "f32" : "f64"));
    }
    return static_cast<T>(d);
  } else {
    const int64_t i = stack_to<int64_t>(v);
    if (i < std::numeric_limits<T>::min() || i > std::numeric_limits<T>::max()) {
      fail(who + " = " + std::to_string(i) + " does not fit " + (sizeof(T) == 4 ? "i32" : "i64"));
    }
    return static_cast<T>(i);
  }
}

// An array attribute, which the Python wrapper hands over as a 1-D CPU
// tensor of the element type (torch 2.9's stable ABI takes no list). The
// span is valid while `t` lives.
template <typename T>
Span<const T> array_attr(const char* op, const char* name, const TensorView& t) {
  const int32_t dtype = sizeof(T) == 4 ? aoti_torch_dtype_int32() : aoti_torch_dtype_int64();
  if (!t.is_cpu() || t.dim != 1 || t.dtype != dtype || !t.is_contiguous()) {
    fail(std::string(op) + ": attribute '" + name + "' must arrive as a contiguous 1-D CPU tensor of " +
         (sizeof(T) == 4 ? "int32" : "int64") + " (call the op with a list of ints)");
  }
  return Span<const T>(static_cast<const T*>(t.data), static_cast<size_t>(t.sizes[0]));
}

// Results of a kernel body as a RuntimeError.
inline void check_status(const Status& s) {
  if (!s.ok()) fail(s.message());
}

#ifdef USE_CUDA
// Makes `device_index` current for the call when it is not already (the
// common case costs one query, not a guard).
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int32_t device_index) {
    int32_t current = -1;
    check_shim(aoti_torch_get_current_device_index(&current), "get_current_device_index");
    if (current != device_index) {
      check_shim(aoti_torch_create_device_guard(device_index, &guard_), "create_device_guard");
    }
  }
  ~CudaDeviceScope() {
    if (guard_ != nullptr) aoti_torch_delete_device_guard(guard_);
  }
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;

 private:
  DeviceGuardHandle guard_ = nullptr;
};

// The caller's current stream on the device: kernels must launch there
// (torch.compile's CUDA graphs and user streams depend on it).
inline void* current_cuda_stream(int32_t device_index) {
  void* stream = nullptr;
  check_shim(aoti_torch_get_current_cuda_stream(device_index, &stream), "get_current_cuda_stream");
  return stream;
}
#endif

// The device a boxed kernel is registered for. Constructed from the call's
// first input (bind() checks every other tensor against it), it refuses a
// tensor on another device and gives the opgen::Platform the body runs on.
class OnCpu {
 public:
  OnCpu(const char* op, const TensorView& first) {
    if (!first.is_cpu()) fail(std::string(op) + ": the CPU kernel got tensors on " + first.device_text());
  }
  opgen::Cpu platform() const { return {}; }
};

#if defined(USE_CUDA) && defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
// Also makes the tensors' device current for the call, and launches on the
// caller's current stream there.
class OnCuda {
 public:
  OnCuda(const char* op, const TensorView& first) : scope_(checked_index(op, first)) {
    platform_.stream = static_cast<cudaStream_t>(current_cuda_stream(first.device_index));
  }
  const opgen::Cuda& platform() const { return platform_; }

 private:
  static int32_t checked_index(const char* op, const TensorView& first) {
    if (!first.is_cuda()) fail(std::string(op) + ": the CUDA kernel got tensors on " + first.device_text());
    return first.device_index;
  }
  CudaDeviceScope scope_;
  opgen::Cuda platform_{};
};
#endif

}  // namespace opgen::torch_stable
