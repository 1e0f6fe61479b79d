#include "opgen/opaque.h"

#include <cinttypes>
#include <cstdio>

namespace opgen::opaque {
namespace {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

}  // namespace

Status check_header(const char* data, size_t size, size_t fixed_size, uint64_t fingerprint,
                    const char* op, Extent extent) {
  const std::string who = std::string(op) + ": opaque descriptor";
  if (data == nullptr && size > 0) return Status::InvalidArgument(who + " is a null pointer");
  if (size < kHeaderSize) {
    return Status::InvalidArgument(who + " is " + std::to_string(size) +
                                   " bytes, shorter than its " + std::to_string(kHeaderSize) +
                                   "-byte header (expected " + std::to_string(fixed_size) +
                                   " bytes); was it written by this package's encoder?");
  }
  if (std::memcmp(data, kMagic, sizeof kMagic) != 0) {
    return Status::InvalidArgument(who + " does not start with the opgen magic 'OPGN'; it was not written by opgen");
  }
  const uint16_t version = read_field<uint16_t>(data, 4);
  if (version != kLayoutVersion) {
    return Status::InvalidArgument(who + " has layout version " + std::to_string(version) +
                                   "; this build reads version " + std::to_string(kLayoutVersion));
  }
  if (read_field<uint16_t>(data, 6) != 0) {
    return Status::InvalidArgument(who + " has non-zero reserved bytes 6-7; it was not written by "
                                   "this layout's encoder");
  }
  const uint64_t found = read_field<uint64_t>(data, 8);
  if (found != fingerprint) {
    return Status::InvalidArgument(who + " has fingerprint " + hex(found) + ", expected " +
                                   hex(fingerprint) +
                                   ": it belongs to another op or to another revision of this "
                                   "op's spec; encode it with this package's encoder");
  }
  if (extent == Extent::kFixedThenArrays && size < fixed_size) {
    return Status::InvalidArgument(who + " is " + std::to_string(size) + " bytes, shorter than the " +
                                   std::to_string(fixed_size) + " bytes of its fixed fields");
  }
  return extent == Extent::kExact ? check_size(size, fixed_size, op) : Status::Ok();
}

Status check_size(size_t size, size_t expected_size, const char* op) {
  if (size != expected_size) {
    return Status::InvalidArgument(std::string(op) + ": opaque descriptor is " + std::to_string(size) +
                                   " bytes; layout " + std::to_string(kLayoutVersion) + " of this op is " +
                                   std::to_string(expected_size) + " bytes");
  }
  return Status::Ok();
}

std::string header(size_t size, uint64_t fingerprint) {
  std::string out(size, '\0');
  std::memcpy(&out[0], kMagic, sizeof kMagic);
  write_field<uint16_t>(out, 4, kLayoutVersion);
  write_field<uint16_t>(out, 6, 0);
  write_field<uint64_t>(out, 8, fingerprint);
  return out;
}

namespace {

size_t field_size(const Field& f) {
  switch (f.kind) {
    case Field::kDtype: return 1;
    case Field::kPresent:
    case Field::kRequested: return 4;
    case Field::kBatch:
    case Field::kSymbol: return 8;
    case Field::kAttr: break;
  }
  switch (f.attr) {
    case AttrKind::kBool: return 1;
    case AttrKind::kI64:
    case AttrKind::kF64: return 8;
    default: return 4;  // i32, f32, an enum's index, an array's length
  }
}

size_t element_size(AttrKind k) { return k == AttrKind::kI64Array ? 8 : 4; }
bool is_array(AttrKind k) { return k == AttrKind::kI32Array || k == AttrKind::kI64Array; }

}  // namespace

size_t fixed_size(const Field* fields, size_t count) {
  size_t size = kHeaderSize;
  for (size_t i = 0; i < count; ++i) size += field_size(fields[i]);
  return size;
}

Status decode(const char* data, size_t size, const Field* fields, size_t count, uint64_t fingerprint, const char* op,
              Values* out) {
  const size_t fixed = fixed_size(fields, count);
  bool arrays = false;
  for (size_t i = 0; i < count; ++i) arrays = arrays || (fields[i].kind == Field::kAttr && is_array(fields[i].attr));
  if (Status s = check_header(data, size, fixed, fingerprint, op, arrays ? Extent::kFixedThenArrays : Extent::kExact);
      !s.ok()) {
    return s;
  }
  // The lengths fix the size: 32-bit lengths cannot overflow the 64-bit sum.
  size_t at = kHeaderSize, expected = fixed;
  for (size_t i = 0; i < count; ++i) {
    if (fields[i].kind == Field::kAttr && is_array(fields[i].attr)) {
      expected += size_t{read_field<uint32_t>(data, at)} * element_size(fields[i].attr);
    }
    at += field_size(fields[i]);
  }
  if (Status s = check_size(size, expected, op); !s.ok()) return s;
  at = kHeaderSize;
  size_t tail = fixed;
  for (size_t i = 0; i < count; ++i) {
    const Field& f = fields[i];
    const size_t n = f.kind == Field::kDtype     ? out->dtype_count
                     : f.kind == Field::kSymbol ? out->symbol_count
                     : f.kind == Field::kAttr   ? out->attr_count
                                                : 0;
    if (n >= Values::kMax) return Status::InvalidArgument(std::string(op) + ": the descriptor has too many fields");
    switch (f.kind) {
      case Field::kDtype: out->dtypes[out->dtype_count++] = read_field<uint8_t>(data, at); break;
      case Field::kPresent: out->present = read_field<uint32_t>(data, at); break;
      case Field::kRequested: out->requested = read_field<uint32_t>(data, at); break;
      case Field::kBatch: out->batch = read_field<int64_t>(data, at); break;
      case Field::kSymbol: out->symbols[out->symbol_count++] = read_field<int64_t>(data, at); break;
      case Field::kAttr: {
        AttrValue& v = out->attrs[out->attr_count++];
        switch (f.attr) {
          case AttrKind::kBool: {
            // Only what encode writes, so that a descriptor has one spelling.
            const uint8_t byte = read_field<uint8_t>(data, at);
            if (byte > 1) {
              return Status::InvalidArgument(std::string(op) + ": opaque descriptor field '" + f.name +
                                             "' (bool) holds " + std::to_string(byte) + ", not 0 or 1");
            }
            v.b = byte == 1;
            break;
          }
          case AttrKind::kI32:
          case AttrKind::kEnum:
          case AttrKind::kDtype: v.i = read_field<int32_t>(data, at); break;
          case AttrKind::kI64: v.i = read_field<int64_t>(data, at); break;
          case AttrKind::kF32: v.f = read_field<float>(data, at); break;
          case AttrKind::kF64: v.f = read_field<double>(data, at); break;
          case AttrKind::kI32Array: {
            std::vector<int32_t>& e = out->i32_arrays.emplace_back(read_field<uint32_t>(data, at));
            for (size_t k = 0; k < e.size(); ++k, tail += 4) e[k] = read_field<int32_t>(data, tail);
            v.i32s = Span<const int32_t>(e.data(), e.size());
            break;
          }
          case AttrKind::kI64Array: {
            std::vector<int64_t>& e = out->i64_arrays.emplace_back(read_field<uint32_t>(data, at));
            for (size_t k = 0; k < e.size(); ++k, tail += 8) e[k] = read_field<int64_t>(data, tail);
            v.i64s = Span<const int64_t>(e.data(), e.size());
            break;
          }
        }
        break;
      }
    }
    at += field_size(f);
  }
  return Status::Ok();
}

std::string encode(const Field* fields, size_t count, uint64_t fingerprint, const Values& values) {
  size_t size = fixed_size(fields, count);
  size_t attr = 0;
  for (size_t i = 0; i < count; ++i) {
    if (fields[i].kind != Field::kAttr) continue;
    const AttrValue& v = values.attrs[attr++];
    if (fields[i].attr == AttrKind::kI32Array) size += v.i32s.size() * 4;
    if (fields[i].attr == AttrKind::kI64Array) size += v.i64s.size() * 8;
  }
  std::string out = header(size, fingerprint);
  size_t at = kHeaderSize, tail = fixed_size(fields, count);
  size_t dtype = 0, symbol = 0;
  attr = 0;
  for (size_t i = 0; i < count; ++i) {
    const Field& f = fields[i];
    switch (f.kind) {
      case Field::kDtype: write_field<uint8_t>(out, at, values.dtypes[dtype++]); break;
      case Field::kPresent: write_field<uint32_t>(out, at, values.present); break;
      case Field::kRequested: write_field<uint32_t>(out, at, values.requested); break;
      case Field::kBatch: write_field<int64_t>(out, at, values.batch); break;
      case Field::kSymbol: write_field<int64_t>(out, at, values.symbols[symbol++]); break;
      case Field::kAttr: {
        const AttrValue& v = values.attrs[attr++];
        switch (f.attr) {
          case AttrKind::kBool: write_field<uint8_t>(out, at, v.b ? 1 : 0); break;
          case AttrKind::kI32:
          case AttrKind::kEnum:
          case AttrKind::kDtype: write_field<int32_t>(out, at, static_cast<int32_t>(v.i)); break;
          case AttrKind::kI64: write_field<int64_t>(out, at, v.i); break;
          case AttrKind::kF32: write_field<float>(out, at, static_cast<float>(v.f)); break;
          case AttrKind::kF64: write_field<double>(out, at, v.f); break;
          case AttrKind::kI32Array:
            write_field<uint32_t>(out, at, static_cast<uint32_t>(v.i32s.size()));
            for (int32_t e : v.i32s) write_field<int32_t>(out, (tail += 4) - 4, e);
            break;
          case AttrKind::kI64Array:
            write_field<uint32_t>(out, at, static_cast<uint32_t>(v.i64s.size()));
            for (int64_t e : v.i64s) write_field<int64_t>(out, (tail += 8) - 8, e);
            break;
        }
        break;
      }
    }
    at += field_size(f);
  }
  return out;
}

}  // namespace opgen::opaque
