#include "opgen/torch_stable.h"

#include <cmath>
#include <limits>
#include <string>


namespace opgen::torch_stable {

DType dtype_of(int32_t t) {
#define OPGEN_DTYPE_OF_TORCH(e, name, cpp, xla, python, ...) \
  if (t == aoti_torch_dtype_##python()) return DType::e;
  OPGEN_DTYPES(OPGEN_DTYPE_OF_TORCH)
#undef OPGEN_DTYPE_OF_TORCH
  return DType::kUnknown;
}

int32_t torch_dtype(DType d) {
  switch (d) {
#define OPGEN_TORCH_DTYPE(e, name, cpp, xla, python, ...) \
  case DType::e: return aoti_torch_dtype_##python();
    OPGEN_DTYPES(OPGEN_TORCH_DTYPE)
#undef OPGEN_TORCH_DTYPE
    case DType::kUnknown: break;
  }
  fail("opgen: no torch dtype for an unknown dtype");
}

// torch's name of a dtype opgen does not take, for the message that refuses it.
const char* foreign_name(int32_t t) {
  if (t == aoti_torch_dtype_int16()) return "int16";
  if (t == aoti_torch_dtype_uint16()) return "uint16";
  if (t == aoti_torch_dtype_uint32()) return "uint32";
  if (t == aoti_torch_dtype_uint64()) return "uint64";
  if (t == aoti_torch_dtype_complex32()) return "complex32";
  if (t == aoti_torch_dtype_complex64()) return "complex64";
  if (t == aoti_torch_dtype_complex128()) return "complex128";
  if (t == aoti_torch_dtype_float8_e4m3fnuz()) return "float8_e4m3fnuz";
  if (t == aoti_torch_dtype_float8_e5m2fnuz()) return "float8_e5m2fnuz";
  return "a dtype opgen does not support";
}

// --- TensorView -----------------------------------------------------------------

TensorView::TensorView(const Tensor& t, const char* op, const char* role, const char* name) : handle(t.get()) {
  bool defined = false;
  check_shim(aoti_torch_is_defined(handle, &defined), "is_defined");
  if (!defined) {
    fail(std::string(op) + ": " + role + " '" + name + "' is required, not None");
  }
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

std::string TensorView::device_text() const {
  return is_cuda() ? "cuda:" + std::to_string(device_index) : is_cpu() ? "cpu" : "another device";
}

Tensor empty(const TensorView& like, const int64_t* sizes, int64_t rank, int32_t dtype, const Buffer& buffer,
             void** data) {
  // The message is made only on a failure: this runs for every output of every call.
  auto what = [&] {
    std::string listed;
    for (size_t i = 0; i < buffer.count; ++i) listed += (i ? ", " : "") + std::string(buffer.names[i]);
    return std::string(buffer.op) + ": " + buffer.role + " '" + listed + "'";
  };
  int64_t strides[Binder::kMaxRank * 2];
  if (rank > static_cast<int64_t>(std::size(strides))) fail("opgen: outputs of more than 64 dimensions");
  // Contiguous strides as torch makes them, so that an empty output's cannot overflow either.
  if (!row_major_strides(sizes, static_cast<size_t>(rank), strides)) {
    fail(what() + " of shape " + shape_text(sizes, static_cast<size_t>(rank)) + " has strides past 2^63 - 1");
  }
  AtenTensorHandle out = nullptr;
  if (aoti_torch_empty_strided(rank, sizes, strides, dtype, like.device_type, like.device_index, &out) !=
      AOTI_TORCH_SUCCESS) {
    // The binder has bounded the bytes by int64 (Binder::output, Binder::workspace).
    const int64_t bytes = element_count(sizes, static_cast<size_t>(rank)) * aoti_torch_dtype_element_size(dtype);
    fail(what() + " of shape " + shape_text(sizes, static_cast<size_t>(rank)) + " (" + std::to_string(bytes) +
         " bytes) could not be allocated on " + like.device_text() + "; torch's allocator refused it");
  }
  Tensor t(out);
  check_shim(aoti_torch_get_data_ptr(out, data), "get_data_ptr");
  return t;
}

// --- TorchSource ------------------------------------------------------------------

TorchSource::TorchSource(const char* op, const char* const* input_names, size_t inputs, size_t required, size_t attrs,
                         StableIValue* stack)
    : op_(op), inputs_(inputs), attrs_(attrs), stack_(stack) {
  if (inputs > kMaxInputs) fail(std::string(op) + ": more than 64 inputs");
  for (size_t i = 0; i < inputs; ++i) {
    // A Tensor and a Tensor? travel differently on the stack.
    if (i < required) tensors_[i] = stack_to<Tensor>(stack[i]);
    else tensors_[i] = stack_to<std::optional<Tensor>>(stack[i]);
    if (!tensors_[i]) continue;
    const TensorView& v = views_[i].emplace(*tensors_[i], op, "input", input_names[i]);
    if (first_ == nullptr) {
      first_ = &v;
    } else if (v.device_type != first_->device_type || v.device_index != first_->device_index) {
      size_t f = 0;
      while (!views_[f] || &*views_[f] != first_) ++f;
      fail(std::string(op) + ": input '" + input_names[i] + "' is on " + v.device_text() + ", but input '" +
           input_names[f] + "' is on " + first_->device_text() + "; all tensors of one call must be on one device");
    }
    refs_[i] = {dtype_of(v.dtype), nullptr, static_cast<size_t>(v.dim), given_dims(v.sizes), v.strides, v.data};
    if (refs_[i].dtype == DType::kUnknown) refs_[i].foreign = foreign_name(v.dtype);
    present_[i] = true;
  }
  if (first_ == nullptr) fail(std::string(op) + ": every input is None");
}

Status TorchSource::attr(size_t i, const char* name, AttrKind kind, AttrValue* value) {
  const StableIValue v = stack_[inputs_ + i];
  switch (kind) {
    case AttrKind::kBool: value->b = stack_to<bool>(v); break;
    // torch passes every int as int64 and every float as double; the binder
    // checks that the value fits the spec's type.
    case AttrKind::kI32:
    case AttrKind::kI64:
    case AttrKind::kEnum: value->i = stack_to<int64_t>(v); break;  // an enum as its index (the lowered op)
    case AttrKind::kDtype: {
      // A ScalarType arrives as the shim's dtype code (int32), as a tensor's dtype does.
      const int32_t code = stack_to<int32_t>(v);
      const DType d = dtype_of(code);
      value->i = d == DType::kUnknown ? -1 : static_cast<int64_t>(d);
      if (d == DType::kUnknown) value->name = foreign_name(code);  // for the message
      break;
    }
    case AttrKind::kF32:
    case AttrKind::kF64: value->f = stack_to<double>(v); break;
    case AttrKind::kI32Array:
    case AttrKind::kI64Array: {
      // The lowered op takes an array as a 1-D CPU tensor of its element type.
      const Tensor& t = keep_.emplace_back(stack_to<Tensor>(v));
      const TensorView a(t, op_, "attribute", name);
      const bool i32 = kind == AttrKind::kI32Array;
      const int32_t want = i32 ? aoti_torch_dtype_int32() : aoti_torch_dtype_int64();
      bool dense = a.dim == 1 && (a.sizes[0] <= 1 || a.strides[0] == 1);
      if (!a.is_cpu() || a.dim != 1 || a.dtype != want || !dense) {
        return Status::InvalidArgument(std::string(op_) + ": attribute '" + name +
                                       "' must arrive as a contiguous 1-D CPU tensor of " +
                                       (i32 ? "int32" : "int64") + " (call the op with a list of ints)");
      }
      const size_t n = static_cast<size_t>(a.sizes[0]);
      if (i32) value->i32s = Span<const int32_t>(static_cast<const int32_t*>(a.data), n);
      else value->i64s = Span<const int64_t>(static_cast<const int64_t*>(a.data), n);
      break;
    }
  }
  return Status::Ok();
}

Status TorchSource::output(size_t, const char* name, const char*, DType dtype, const int64_t* dims, size_t rank,
                           void** data) {
  fresh_[fresh_count_++] = empty(*first_, dims, static_cast<int64_t>(rank), torch_dtype(dtype), {op_, "output", &name}, data);
  return Status::Ok();
}

Status TorchSource::workspace(size_t, const char* const* names, size_t count, size_t bytes, void** data) {
  const int64_t size = static_cast<int64_t>(bytes);
  keep_.push_back(
      empty(*first_, &size, 1, aoti_torch_dtype_uint8(), {op_, count == 1 ? "workspace" : "workspaces", names, count},
            data));
  return Status::Ok();
}

// --- devices ------------------------------------------------------------------------


OnCpu::OnCpu(const char* op, const TensorView& first) {
  if (!first.is_cpu()) fail(std::string(op) + ": the CPU kernel got tensors on " + first.device_text());
}

#if defined(USE_CUDA) && defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
namespace {
int32_t checked_index(const char* op, const TensorView& first) {
  if (!first.is_cuda()) fail(std::string(op) + ": the CUDA kernel got tensors on " + first.device_text());
  return first.device_index;
}
}  // namespace

OnCuda::OnCuda(const char* op, const TensorView& first) : scope_(checked_index(op, first)) {
  if (!scope_.status().ok()) fail(std::string(op) + ": " + scope_.status().message());
  void* stream = nullptr;
  check_shim(aoti_torch_get_current_cuda_stream(first.device_index, &stream), "get_current_cuda_stream");
  platform_.stream = static_cast<cudaStream_t>(stream);
}
#endif

}  // namespace opgen::torch_stable
