// libFuzzer target for the legacy opaque descriptor decoders of simple_add
// (fixed fields only) and flip (an array attribute whose elements follow the
// fixed fields): generated/include/opgen_ops/{simple_add,flip}_opaque.h and
// runtime/src/opaque.cc. Every input goes through both decoders.
//
// The input is copied into a heap buffer of exactly its size, so ASan reports
// any read past the end. Beyond the sanitizers, it checks:
//   * decode succeeds only for exactly kOpaqueSize bytes, and then
//     encode_opaque(decoded) reproduces the input byte for byte;
//   * decode succeeds for every kOpaqueSize-byte input whose 16-byte header is
//     the one encode_opaque writes (whatever the field bytes are);
//   * a failure is kInvalidArgument with a message naming the op, and leaves
//     the output descriptor untouched;
//   * flip's decoder accepts exactly the inputs that encode_opaque reproduces
//     byte for byte, whatever the array length field says.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "opgen/opaque.h"
#include "opgen/status.h"
#include "opgen_ops/flip_opaque.h"
#include "opgen_ops/simple_add_opaque.h"

namespace {

namespace sa = opgen_ops::simple_add;

constexpr int64_t kUntouchedN = 0x5A5A5A5A5A5A5A5Aull;
constexpr uint32_t kUntouchedAlphaBits = 0xC49A5000u;  // -1234.5f

[[noreturn]] void fail(const char* what, const opgen::Status& s, size_t size) {
  std::fprintf(stderr, "opaque_fuzzer: invariant violated (%zu-byte input): %s\nstatus: %s\n",
               size, what, s.ok() ? "ok" : s.message().c_str());
  std::abort();
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// flip: decode succeeds iff the input is what encode_opaque writes for the
// decoded descriptor; a rejection writes nothing.
void check_flip(const char* buf, size_t size) {
  namespace fl = opgen_ops::flip;
  fl::Descriptor d{};
  d.batch = kUntouchedN;
  const opgen::Status s = fl::decode_opaque(buf, size, &d);
  if (s.ok()) {
    const std::string again = fl::encode_opaque(d);
    if (again.size() != size || std::memcmp(again.data(), buf, size) != 0) {
      fail("flip: encode_opaque(decode_opaque(x)) != x", s, size);
    }
  } else {
    if (s.code() != opgen::StatusCode::kInvalidArgument) fail("flip: a rejection is not kInvalidArgument", s, size);
    if (s.message().find("flip: opaque descriptor") == std::string::npos) fail("flip: a rejection does not name the op", s, size);
    if (d.batch != kUntouchedN || !d.dims.empty()) fail("flip: a rejected descriptor was partly decoded", s, size);
  }
}

sa::Descriptor untouched() {
  sa::Descriptor d;
  d.N = kUntouchedN;
  std::memcpy(&d.alpha, &kUntouchedAlphaBits, sizeof d.alpha);
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Exactly sized: new char[0] is a valid, zero-length allocation.
  std::unique_ptr<char[]> buf(new char[size]);
  if (size) std::memcpy(buf.get(), data, size);

  sa::Descriptor d = untouched();
  const opgen::Status s = sa::decode_opaque(buf.get(), size, &d);

  const std::string header = opgen::opaque::header(sa::kOpaqueSize, sa::kOpaqueFingerprint);
  const bool well_formed = size == sa::kOpaqueSize &&
                           std::memcmp(buf.get(), header.data(), opgen::opaque::kHeaderSize) == 0;

  if (s.ok()) {
    if (size != sa::kOpaqueSize) fail("a descriptor of the wrong size was accepted", s, size);
    if (!well_formed) fail("a descriptor with a foreign header was accepted", s, size);
    const std::string again = sa::encode_opaque(d);
    if (again.size() != size || std::memcmp(again.data(), buf.get(), size) != 0) {
      fail("encode_opaque(decode_opaque(x)) != x", s, size);
    }
  } else {
    if (well_formed) fail("a well-formed descriptor was rejected", s, size);
    if (s.code() != opgen::StatusCode::kInvalidArgument) fail("a rejection is not kInvalidArgument", s, size);
    if (s.message().find("simple_add: opaque descriptor") == std::string::npos) {
      fail("a rejection does not name the op", s, size);
    }
    if (d.N != kUntouchedN || bits(d.alpha) != kUntouchedAlphaBits) {
      fail("a rejected descriptor was partly decoded", s, size);
    }
  }

  check_flip(buf.get(), size);

  // The null-pointer paths: (nullptr, 0) is a short descriptor, never a crash.
  if (size == 0) {
    sa::Descriptor n = untouched();
    const opgen::Status ns = sa::decode_opaque(nullptr, 0, &n);
    if (ns.ok()) fail("a null, empty descriptor was accepted", ns, 0);
  }
  return 0;
}
