// opgen::Status as the XLA typed-FFI error that JAX raises in Python.
#pragma once

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

}  // namespace opgen
