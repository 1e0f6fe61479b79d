// The dtype helpers of opgen/dtypes.h, from the table of opgen/dtype_table.h.
#include "opgen/dtypes.h"

#include <cstring>

namespace opgen {

const char* dtype_name(DType d) {
  switch (d) {
#define OPGEN_DTYPE_NAME(e, name, ...) \
  case DType::e: return #name;
    OPGEN_DTYPES(OPGEN_DTYPE_NAME)
#undef OPGEN_DTYPE_NAME
    case DType::kUnknown: break;
  }
  return "an unsupported dtype";
}

const char* numpy_name(DType d) {
  switch (d) {
#define OPGEN_PYTHON_NAME(e, name, cpp, xla, python, size, ...) \
  case DType::e: return #python;
    OPGEN_DTYPES(OPGEN_PYTHON_NAME)
#undef OPGEN_PYTHON_NAME
    case DType::kUnknown: break;
  }
  return "a dtype opgen does not support";
}

DType dtype_of_name(const char* name) {
  for (int code = 0; code < kDTypeCount; ++code) {
    if (std::strcmp(name, numpy_name(static_cast<DType>(code))) == 0) return static_cast<DType>(code);
  }
  return DType::kUnknown;
}

size_t dtype_size(DType d) {
  switch (d) {
#define OPGEN_DTYPE_SIZE(e, name, cpp, xla, python, size, ...) \
  case DType::e: return size;
    OPGEN_DTYPES(OPGEN_DTYPE_SIZE)
#undef OPGEN_DTYPE_SIZE
    case DType::kUnknown: break;
  }
  return 0;
}

}  // namespace opgen
