// The typed XLA FFI (custom-call api_version 4) for every op: one handler
// template over the op's generated Rules (`<op>_rules.h`), which checks the
// call with the op's bind() (opgen/binder.h) and runs its body. The handler
// takes its operands, results and attributes whole (RemainingArgs,
// RemainingRets, a Dictionary), so that its binding is the same for every op:
//
//   XLA_FFI_DEFINE_HANDLER_SYMBOL(sym, opgen::xla_ffi::Handler<Rules>::cpu,
//                                 opgen::xla_ffi::cpu_binding());
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "opgen/binder.h"
#include "opgen/run_call.h"
#include "opgen/platform.h"
#include "opgen/shape_check.h"
#include "opgen/xla_ffi_error.h"
#include "xla/ffi/api/ffi.h"

namespace opgen::xla_ffi {

namespace ffi = ::xla::ffi;

// opgen's dtype of an XLA element type (kUnknown for the ones opgen lacks).
inline DType dtype_of(ffi::DataType t) {
  switch (t) {
#define OPGEN_DTYPE_OF_XLA(e, name, cpp, xla, ...) \
  case ffi::DataType::xla: return DType::e;
    OPGEN_DTYPES(OPGEN_DTYPE_OF_XLA)
#undef OPGEN_DTYPE_OF_XLA
    default: return DType::kUnknown;
  }
}

// A typed-FFI call as a Source: the operands are the required inputs, then
// the optional ones the presence mask (attribute `present_`) names; the
// results are the outputs (those on request only where the request mask,
// attribute `requested_`, asks for them), then one byte buffer per workspace
// of the handler's platform; attributes are
// looked up by name. Workspaces are results, not memory from the FFI's
// scratch allocator, so that XLA plans them with the rest of the program's
// buffers (the way its own cuDNN and cuBLAS calls get theirs; jaxlib's GPU
// scratch allocator refuses requests) and the call stays capturable in a CUDA
// graph. `N`, the op's inputs, sizes its storage: a call allocates nothing
// on the heap unless it fails.
template <size_t N>
class FfiSource : public Source {
 public:
  // `aliases[i]`: the input output i updates in place, or -1; `requests[i]`:
  // output i's bit in the request mask, or -1 (result_count).
  FfiSource(const char* op, Device device, size_t required, size_t outputs, const int* aliases, const int* requests,
            size_t requestable, size_t workspaces, ffi::RemainingArgs args, ffi::RemainingRets rets,
            ffi::Dictionary attrs);

  // The call's operands and results match the op's (else why not).
  const Status& status() const { return status_; }

  const TensorRef* input(size_t i) override { return i < N && present_[i] ? &inputs_[i] : nullptr; }
  Status attr(size_t i, const char* name, AttrKind kind, AttrValue* value) override;
  Status output(size_t i, const char* name, const char* declared, DType dtype, const int64_t* dims, size_t rank,
                void** data) override;
  Status workspace(size_t i, const char* const* names, size_t count, size_t bytes, void** data) override;
  bool requested(size_t k) override { return (requested_ >> k) & 1; }
  Device device() const override { return device_; }

 private:
  const char* op_;
  Device device_;
  uint64_t requested_ = 0;
  ffi::RemainingRets rets_;
  ffi::Dictionary attrs_;
  size_t outputs_ = 0;  // the results before the workspaces
  std::array<TensorRef, N> inputs_{};
  std::array<bool, N> present_{};
  Status status_;
};

// Binds the call with the op's rules and runs its body on `platform`.
template <typename Rules, typename Platform>
ffi::Error run(const Platform& platform, FfiSource<Rules::kInputs>& source) {
  if (!source.status().ok()) return to_ffi_error(source.status());
  Binder b(Rules::kName, source);
  return to_ffi_error(run_call<Rules>(b, platform));
}

template <typename Rules>
struct Handler {
  static ffi::Error cpu(ffi::RemainingArgs args, ffi::RemainingRets rets, ffi::Dictionary attrs) {
    FfiSource<Rules::kInputs> source(Rules::kName, Device::kCpu, Rules::kRequiredInputs, Rules::kOutputs,
                                     Rules::kOutputAliases, Rules::kOutputRequests, Rules::kRequestedOutputs,
                                     Rules::kWorkspaces[static_cast<size_t>(Device::kCpu)], args, rets, attrs);
    return run<Rules>(Cpu{}, source);
  }
#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
  static ffi::Error cuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                         ffi::Dictionary attrs) {
    FfiSource<Rules::kInputs> source(Rules::kName, Device::kCuda, Rules::kRequiredInputs, Rules::kOutputs,
                                     Rules::kOutputAliases, Rules::kOutputRequests, Rules::kRequestedOutputs,
                                     Rules::kWorkspaces[static_cast<size_t>(Device::kCuda)], args, rets, attrs);
    return run<Rules>(Cuda{stream}, source);
  }
#endif
};

inline auto cpu_binding() { return ffi::Ffi::Bind().RemainingArgs().RemainingRets().Attrs(); }
#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
inline auto cuda_binding() {
  return ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().RemainingArgs().RemainingRets().Attrs();
}
#endif

// --- FfiSource (inline: the XLA FFI headers are header-only) -------------------

template <size_t N>
FfiSource<N>::FfiSource(const char* op, Device device, size_t required, size_t outputs, const int* aliases,
                        const int* requests, size_t requestable, size_t workspaces, ffi::RemainingArgs args,
                        ffi::RemainingRets rets, ffi::Dictionary attrs)
    : op_(op), device_(device), rets_(rets), attrs_(attrs) {
  constexpr size_t inputs = N;
  // Bit i of the mask: the i-th optional input is among the operands.
  int64_t mask = 0;
  if (inputs > required) {
    ffi::ErrorOr<int64_t> m = attrs_.get<int64_t>("present_");
    if (!m.has_value()) {
      status_ = Status::InvalidArgument(std::string(op) + ": the call has no presence mask (attribute 'present_')");
      return;
    }
    mask = m.value();
    if (std::string e = presence_error(op, mask, inputs - required, args.size() - std::min(args.size(), required));
        !e.empty()) {
      status_ = Status::InvalidArgument(e);
      return;
    }
  }
  // Bit k of the request mask: the caller asks for the k-th output on request.
  if (requestable > 0) {
    ffi::ErrorOr<int64_t> r = attrs_.get<int64_t>("requested_");
    if (!r.has_value()) {
      status_ = Status::InvalidArgument(std::string(op) + ": the call has no request mask (attribute 'requested_')");
      return;
    }
    if (std::string e = request_error(op, r.value(), requestable); !e.empty()) {
      status_ = Status::InvalidArgument(e);
      return;
    }
    requested_ = static_cast<uint64_t>(r.value());
  }
  const size_t expected = required + present_count(mask);
  outputs_ = result_count(aliases, requests, outputs, required, static_cast<uint64_t>(mask), requested_);
  const size_t results = outputs_ + workspaces;
  if (args.size() != expected || rets_.size() != results) {
    status_ = Status::InvalidArgument(std::string(op) + ": the call has " + std::to_string(args.size()) +
                                      " operand(s) and " + std::to_string(rets_.size()) + " result(s); the op takes " +
                                      std::to_string(expected) + " and gives " + std::to_string(results));
    return;
  }
  size_t next = 0;
  for (size_t i = 0; i < inputs; ++i) {
    if (!input_given(i, required, static_cast<uint64_t>(mask))) continue;
    ffi::ErrorOr<ffi::AnyBuffer> buffer = args.get<ffi::AnyBuffer>(next++);
    if (!buffer.has_value()) {
      status_ = Status::InvalidArgument(std::string(op) + ": operand " + std::to_string(next - 1) + ": " +
                                        buffer.error().message());
      return;
    }
    const ffi::AnyBuffer b = buffer.value();
    const auto dims = b.dimensions();
    TensorRef& t = inputs_[i];
    t.dtype = dtype_of(b.element_type());
    if (t.dtype == DType::kUnknown) t.foreign = dtype_name(b.element_type());
    t.rank = dims.size();
    t.dims = given_dims(dims.begin());
    t.data = b.untyped_data();
    present_[i] = true;
  }
}

template <size_t N>
Status FfiSource<N>::attr(size_t, const char* name, AttrKind kind, AttrValue* value) {
  auto failed = [&](const ffi::Error& e) {
    return Status::InvalidArgument(std::string(op_) + ": attribute '" + name + "': " + e.message());
  };
  switch (kind) {
    case AttrKind::kBool: {
      auto v = attrs_.get<bool>(name);
      if (!v.has_value()) return failed(v.error());
      value->b = v.value();
      break;
    }
    case AttrKind::kI32:
    case AttrKind::kDtype: {  // a dtype as its code
      auto v = attrs_.get<int32_t>(name);
      if (!v.has_value()) return failed(v.error());
      value->i = v.value();
      break;
    }
    case AttrKind::kI64: {
      auto v = attrs_.get<int64_t>(name);
      if (!v.has_value()) return failed(v.error());
      value->i = v.value();
      break;
    }
    case AttrKind::kF32: {
      auto v = attrs_.get<float>(name);
      if (!v.has_value()) return failed(v.error());
      value->f = v.value();
      break;
    }
    case AttrKind::kF64: {
      auto v = attrs_.get<double>(name);
      if (!v.has_value()) return failed(v.error());
      value->f = v.value();
      break;
    }
    case AttrKind::kEnum: {
      auto v = attrs_.get<std::string_view>(name);
      if (!v.has_value()) return failed(v.error());
      value->name = v.value();
      value->by_name = true;
      break;
    }
    case AttrKind::kI32Array: {
      auto v = attrs_.get<ffi::Span<const int32_t>>(name);
      if (!v.has_value()) return failed(v.error());
      value->i32s = Span<const int32_t>(v.value().begin(), v.value().size());
      break;
    }
    case AttrKind::kI64Array: {
      auto v = attrs_.get<ffi::Span<const int64_t>>(name);
      if (!v.has_value()) return failed(v.error());
      value->i64s = Span<const int64_t>(v.value().begin(), v.value().size());
      break;
    }
  }
  return Status::Ok();
}

template <size_t N>
Status FfiSource<N>::output(size_t i, const char* name, const char* declared, DType dtype, const int64_t* dims,
                            size_t rank, void** data) {
  ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> result = rets_.get<ffi::AnyBuffer>(i);
  if (!result.has_value()) {
    return Status::InvalidArgument(std::string(op_) + ": result " + std::to_string(i) + ": " +
                                   result.error().message());
  }
  ffi::Result<ffi::AnyBuffer> r = result.value();
  // The message is made only on a failure: this runs for every output of every call.
  auto who = [&] { return std::string(op_) + ": output '" + name + "'"; };
  if (dtype_of(r->element_type()) != dtype) {
    return Status::InvalidArgument(who() + " has dtype " + dtype_name(r->element_type()) + "; the spec declares " +
                                   opgen::dtype_name(dtype));
  }
  const auto got = r->dimensions();
  if (!same_dims(got.begin(), got.size(), dims, rank)) {
    return Status::InvalidArgument(who() + " has shape " + shape_text(got.begin(), got.size()) +
                                   "; the call's inputs make it " + shape_text(dims, rank) + " (the spec declares " +
                                   declared + ")");
  }
  *data = r->untyped_data();
  return Status::Ok();
}

template <size_t N>
Status FfiSource<N>::workspace(size_t i, const char* const*, size_t, size_t bytes, void** data) {
  ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> result = rets_.get<ffi::AnyBuffer>(outputs_ + i);
  if (!result.has_value()) {
    return Status::InvalidArgument(std::string(op_) + ": result " + std::to_string(outputs_ + i) + ": " +
                                   result.error().message());
  }
  ffi::Result<ffi::AnyBuffer> r = result.value();
  if (r->size_bytes() < bytes) {
    return Status::InvalidArgument(std::string(op_) + ": workspace " + std::to_string(i) + " (result " +
                                   std::to_string(outputs_ + i) + ") has " + std::to_string(r->size_bytes()) +
                                   " bytes; the call's sizes need " + std::to_string(bytes));
  }
  *data = bytes == 0 ? nullptr : r->untyped_data();
  return Status::Ok();
}

}  // namespace opgen::xla_ffi
