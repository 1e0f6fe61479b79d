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

}  // namespace opgen::opaque
