// opgen::Status as the XLA typed-FFI error that JAX raises in Python, and
// XLA's element types as specs spell them.
#pragma once

#include <string>

#include "opgen/dtype_table.h"
#include "opgen/status.h"
#include "xla/ffi/api/ffi.h"

namespace opgen {

inline ::xla::ffi::Error to_ffi_error(const Status& s) {
  switch (s.kind()) {
    case ErrorKind::kOk:
      return ::xla::ffi::Error::Success();
    case ErrorKind::kWrongType:  // XLA has no code of its own for a wrong type
    case ErrorKind::kInvalidArgument:
      return ::xla::ffi::Error::InvalidArgument(s.message());
    case ErrorKind::kInternal:
      break;
  }
  return ::xla::ffi::Error::Internal(s.message());
}

// An XLA element type as specs spell dtypes (f32, i32, bf16, f8e4m3fn, ...),
// the types opgen does not support included, so that a message never says
// "type 15". opgen's own come from its table; a type that joins the table
// leaves the list of the others (the compiler refuses a case twice).
inline const char* dtype_name(::xla::ffi::DataType t) {
  using ::xla::ffi::DataType;
  switch (t) {
#define OPGEN_XLA_DTYPE_NAME(e, name, cpp, xla, ...) \
  case DataType::xla: return #name;
    OPGEN_DTYPES(OPGEN_XLA_DTYPE_NAME)
#undef OPGEN_XLA_DTYPE_NAME
    case DataType::INVALID: return "invalid";
    case DataType::S1: return "i1";
    case DataType::S2: return "i2";
    case DataType::S4: return "i4";
    case DataType::S16: return "i16";
    case DataType::U1: return "u1";
    case DataType::U2: return "u2";
    case DataType::U4: return "u4";
    case DataType::U16: return "u16";
    case DataType::U32: return "u32";
    case DataType::U64: return "u64";
    case DataType::C64: return "c64";
    case DataType::C128: return "c128";
    case DataType::TOKEN: return "token";
    case DataType::F8E4M3: return "f8e4m3";
    case DataType::F8E4M3B11FNUZ: return "f8e4m3b11fnuz";
    case DataType::F8E5M2FNUZ: return "f8e5m2fnuz";
    case DataType::F8E4M3FNUZ: return "f8e4m3fnuz";
    case DataType::F8E3M4: return "f8e3m4";
    case DataType::F4E2M1FN: return "f4e2m1fn";
    case DataType::F8E8M0FNU: return "f8e8m0fnu";
  }
  return "an XLA element type newer than opgen's headers";
}

}  // namespace opgen
