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
// Each op's decoder (generated) checks the magic, the version, the
// fingerprint and the exact length before it reads a field or an element,
// so a short, long or foreign blob is an error, never a read past the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

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

}  // namespace opgen::opaque
