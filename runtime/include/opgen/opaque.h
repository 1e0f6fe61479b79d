// The legacy opaque descriptor (api_version 1, 2, 3): XLA hands a custom
// call only raw pointers and these bytes, so everything else the kernel needs
// (shape symbols, attributes) travels here. Layout version 1, little-endian,
// no padding:
//
//   offset 0   char[4]  magic "OPGN"
//   offset 4   u16      layout version (1)
//   offset 6   u16      reserved, 0
//   offset 8   u64      fingerprint of the op's field list (package, op, names, types)
//   offset 16  fields   the op's dtype codes, shape symbols (i64) and attributes
//   then       elements of the array attributes, whose lengths (u32) are fields
//
// One decoder serves every op, from the op's list of fields (its Rules'
// kDescriptor): it checks the magic, the version, the fingerprint and the
// exact length before it reads a field or an element, so a short, long or
// foreign blob is an error, never a read past the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "opgen/binder.h"
#include "opgen/status.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "opgen's opaque descriptors are little-endian; this host is not"
#endif

namespace opgen::opaque {

inline constexpr char kMagic[4] = {'O', 'P', 'G', 'N'};
inline constexpr uint16_t kLayoutVersion = 1;
inline constexpr size_t kHeaderSize = 16;

// Whether a descriptor is exactly `fixed_size` bytes, or at least that with
// array elements after the fixed fields (checked by check_size once the
// lengths are read).
enum class Extent { kExact, kFixedThenArrays };

Status check_header(const char* data, size_t size, size_t fixed_size, uint64_t fingerprint,
                    const char* op, Extent extent = Extent::kExact);

// The length check of a descriptor with arrays, once their lengths are known.
Status check_size(size_t size, size_t expected_size, const char* op);

// A field at a fixed offset; the caller has checked the size.
template <typename T>
T read_field(const char* data, size_t offset) {
  T value;
  std::memcpy(&value, data + offset, sizeof(T));
  return value;
}

template <typename T>
void write_field(std::string& out, size_t offset, T value) {
  std::memcpy(&out[offset], &value, sizeof(T));
}

// A blob of `size` bytes with the header filled in.
std::string header(size_t size, uint64_t fingerprint);

// One fixed field of an op's descriptor, in order: a type variable's dtype
// code (u8), the presence mask of the optional inputs (u32), the request
// mask of the outputs on request (u32), the batch count
// (i64), a shape symbol (i64), or an attribute (bool u8, i32, i64, f32, f64,
// an enum's index i32, an array's length u32 with its elements after the
// fixed fields).
struct Field {
  enum Kind : uint8_t { kDtype, kPresent, kRequested, kBatch, kSymbol, kAttr };
  Kind kind;
  const char* name;                 // as the spec names it (dtype_T, present_, batch, N, eps)
  AttrKind attr = AttrKind::kBool;  // kAttr: the attribute's type
};

// An op's descriptor: its fields and fingerprint.
struct Layout {
  const Field* fields;
  size_t count;
  uint64_t fingerprint;
};

// A descriptor's values, decoded.
struct Values {
  static constexpr size_t kMax = 64;
  uint8_t dtypes[kMax] = {};  // each type variable's code
  size_t dtype_count = 0;
  uint32_t present = 0;
  uint32_t requested = 0;
  int64_t batch = 1;
  int64_t symbols[kMax] = {};
  size_t symbol_count = 0;
  AttrValue attrs[kMax];
  size_t attr_count = 0;
  std::vector<std::vector<int32_t>> i32_arrays;  // the elements of array attributes
  std::vector<std::vector<int64_t>> i64_arrays;
};

// The fixed size of a descriptor of `fields` (the header included).
size_t fixed_size(const Field* fields, size_t count);

// Decodes a descriptor of `fields` for `op`, checked first.
Status decode(const char* data, size_t size, const Field* fields, size_t count, uint64_t fingerprint, const char* op,
              Values* out);

// The descriptor of `fields` with `values` (arrays' elements from their spans).
std::string encode(const Field* fields, size_t count, uint64_t fingerprint, const Values& values);

}  // namespace opgen::opaque
