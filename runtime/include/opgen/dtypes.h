// The element types of opgen's specs: their codes (the order of opgen's dtype
// table, which legacy descriptors carry), names and sizes, and storage types
// for the ones C++ has no builtin for. Kernel bodies reinterpret the storage
// types as __half, __nv_bfloat16, __nv_fp8_e4m3 and __nv_fp8_e5m2 (same size
// and layout).
#pragma once

#include <cstddef>
#include <cstdint>

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

// In the order of opgen's dtype table (generator/model.cc): the value is the
// code a legacy descriptor carries for a type variable's dtype.
enum class DType : uint8_t {
  kF16,
  kBF16,
  kF32,
  kF64,
  kI32,
  kI64,
  kU8,
  kBool,
  kF8E4M3FN,
  kF8E5M2,
  kUnknown = 0xFF,  // one the framework has that opgen does not
};

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
template <> struct DTypeOf<f16> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kF64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kI64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kU8; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };
template <> struct DTypeOf<f8e4m3fn> { static constexpr DType value = DType::kF8E4M3FN; };
template <> struct DTypeOf<f8e5m2> { static constexpr DType value = DType::kF8E5M2; };
template <typename T> inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace opgen
