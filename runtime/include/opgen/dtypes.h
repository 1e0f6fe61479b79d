// The element types of opgen's specs (opgen/dtype_table.h lists them): their
// codes, names and sizes, and storage types for the ones C++ has no builtin for. Kernel bodies reinterpret the storage
// types as __half, __nv_bfloat16, __nv_fp8_e4m3 and __nv_fp8_e5m2 (same size
// and layout).
#pragma once

#include <cstddef>
#include <cstdint>

#include "opgen/dtype_table.h"
#include "opgen/host_device.h"

namespace opgen {

struct f16 {
  uint16_t bits;
};
struct bf16 {
  uint16_t bits;
};
// 8-bit floats: e4m3 "fn" (finite, no infinities, one NaN pattern) and e5m2.
struct f8e4m3fn {
  uint8_t bits;
};
struct f8e5m2 {
  uint8_t bits;
};
static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2, "16-bit storage types");
static_assert(sizeof(f8e4m3fn) == 1 && sizeof(f8e5m2) == 1, "8-bit storage types");

// The codes of opgen's dtype table (opgen/dtype_table.h), in its order: the
// value is the code a legacy descriptor carries for a type variable's dtype.
enum class DType : uint8_t {
#define OPGEN_DTYPE_ENUMERATOR(e, ...) e,
  OPGEN_DTYPES(OPGEN_DTYPE_ENUMERATOR)
#undef OPGEN_DTYPE_ENUMERATOR
  kUnknown = 0xFF,  // one the framework has that opgen does not
};

// How many dtypes opgen has: the codes are 0 .. kDTypeCount - 1.
#define OPGEN_DTYPE_ONE(...) +1
inline constexpr int kDTypeCount = 0 OPGEN_DTYPES(OPGEN_DTYPE_ONE);
#undef OPGEN_DTYPE_ONE

// The spec's spelling: "f16", ..., "f8e5m2" ("an unsupported dtype" for kUnknown).
const char* dtype_name(DType d);
// The name numpy, JAX and PyTorch give it: "float16", ..., "float8_e5m2"
// ("a dtype opgen does not support" for kUnknown), as messages to their users spell it.
const char* numpy_name(DType d);
// The DType of a numpy/torch dtype name (kUnknown for one opgen lacks).
DType dtype_of_name(const char* name);
// Bytes per element (0 for kUnknown).
size_t dtype_size(DType d);

// The DType of a C++ element type (the types in a kernel's Args).
template <typename T> struct DTypeOf;
#define OPGEN_DTYPE_OF(e, name, cpp, ...) \
  template <> struct DTypeOf<cpp> { static constexpr DType value = DType::e; };
OPGEN_DTYPES(OPGEN_DTYPE_OF)
#undef OPGEN_DTYPE_OF
template <typename T> inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace opgen
