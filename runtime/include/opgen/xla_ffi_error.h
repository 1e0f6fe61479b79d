// opgen::Status as the XLA typed-FFI error that JAX raises in Python, and the
// dtype messages of the generated FFI handlers.
#pragma once

#include <string>

#include "opgen/status.h"
#include "xla/ffi/api/ffi.h"

namespace opgen {

inline ::xla::ffi::Error to_ffi_error(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return ::xla::ffi::Error::Success();
    case StatusCode::kInvalidArgument:
      return ::xla::ffi::Error::InvalidArgument(s.message());
    case StatusCode::kInternal:
      break;
  }
  return ::xla::ffi::Error::Internal(s.message());
}

// The spec's spelling of an XLA element type.
inline std::string dtype_name(::xla::ffi::DataType t) {
  using ::xla::ffi::DataType;
  switch (t) {
    case DataType::F16: return "f16";
    case DataType::BF16: return "bf16";
    case DataType::F32: return "f32";
    case DataType::F64: return "f64";
    case DataType::S32: return "i32";
    case DataType::S64: return "i64";
    case DataType::U8: return "u8";
    case DataType::PRED: return "bool";
    default: return "XLA type " + std::to_string(static_cast<int>(t));
  }
}

inline std::string dtype_mismatch(const char* op, const char* role, const char* tensor,
                                  ::xla::ffi::DataType got, const char* declared) {
  return std::string(op) + ": " + role + " '" + tensor + "' has dtype " + dtype_name(got) +
         "; the spec declares " + declared;
}

inline std::string type_var_mismatch(const char* op, const char* role, const char* tensor,
                                     ::xla::ffi::DataType got, const char* var,
                                     const char* bound_by, ::xla::ffi::DataType bound) {
  return std::string(op) + ": " + role + " '" + tensor + "' has dtype " + dtype_name(got) +
         ", but its dtype " + var + " is " + dtype_name(bound) + " (bound by input '" + bound_by +
         "')";
}

inline std::string type_var_unsupported(const char* op, const char* bound_by,
                                        ::xla::ffi::DataType got, const char* var,
                                        const char* allowed) {
  return std::string(op) + ": input '" + bound_by + "' has dtype " + dtype_name(got) + "; " +
         var + " must be one of " + allowed;
}

}  // namespace opgen
