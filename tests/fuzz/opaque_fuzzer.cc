// libFuzzer target for the legacy opaque descriptor decoder
// (runtime/src/opaque.cc), over the field lists of two generated ops:
// simple_add (fixed fields only) and flip (an array attribute whose elements
// follow the fixed fields), from generated/include/opgen_ops/*_rules.h. Every
// input goes through both.
//
// The input is copied into a heap buffer of exactly its size, so ASan reports
// any read past the end. Beyond the sanitizers, it checks, for each op:
//   * what decode accepts, encode writes back byte for byte, except that a
//     NaN in an f32 field may come back quieted (it travels as a double);
//     decode accepts that again, with the same values;
//   * a rejection is kInvalidArgument with a message naming the op;
//   * for simple_add, every input of its fixed size whose 16-byte header is
//     the one encode writes is accepted (whatever the field bytes are), and
//     no input of another size is.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "opgen/opaque.h"
#include "opgen/status.h"
#include "opgen_ops/flip_rules.h"
#include "opgen_ops/simple_add_rules.h"

namespace {

[[noreturn]] void fail(const char* op, const char* what, const opgen::Status& s, size_t size) {
  std::fprintf(stderr, "opaque_fuzzer: %s: invariant violated (%zu-byte input): %s\nstatus: %s\n", op, size, what,
               s.ok() ? "ok" : s.message().c_str());
  std::abort();
}

bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; }

// Whether two decoded descriptors of `fields` hold the same values.
bool same(const opgen::opaque::Field* fields, size_t count, const opgen::opaque::Values& a,
          const opgen::opaque::Values& b) {
  if (a.present != b.present || a.batch != b.batch || a.dtype_count != b.dtype_count ||
      a.symbol_count != b.symbol_count || a.attr_count != b.attr_count || a.i32_arrays != b.i32_arrays ||
      a.i64_arrays != b.i64_arrays) {
    return false;
  }
  for (size_t i = 0; i < a.dtype_count; ++i) if (a.dtypes[i] != b.dtypes[i]) return false;
  for (size_t i = 0; i < a.symbol_count; ++i) if (a.symbols[i] != b.symbols[i]) return false;
  size_t attr = 0;
  for (size_t i = 0; i < count; ++i) {
    if (fields[i].kind != opgen::opaque::Field::kAttr) continue;
    const opgen::AttrValue &x = a.attrs[attr], &y = b.attrs[attr];
    ++attr;
    if (x.b != y.b || x.i != y.i || !same_value(x.f, y.f)) return false;
  }
  return true;
}

// Decodes `buf` with the op's fields and checks the invariants; returns
// whether it was accepted.
template <typename Rules>
bool check(const char* buf, size_t size) {
  opgen::opaque::Values v;
  const opgen::Status s = opgen::opaque::decode(buf, size, Rules::kDescriptor, Rules::kDescriptorFields,
                                                Rules::kFingerprint, Rules::kName, &v);
  if (s.ok()) {
    const std::string again = opgen::opaque::encode(Rules::kDescriptor, Rules::kDescriptorFields, Rules::kFingerprint, v);
    if (again.size() == size && std::memcmp(again.data(), buf, size) == 0) return true;
    bool nan = false;
    for (size_t i = 0, attr = 0; i < Rules::kDescriptorFields; ++i) {
      if (Rules::kDescriptor[i].kind != opgen::opaque::Field::kAttr) continue;
      nan = nan || (Rules::kDescriptor[i].attr == opgen::AttrKind::kF32 && std::isnan(v.attrs[attr].f));
      ++attr;
    }
    if (!nan) fail(Rules::kName, "encode(decode(x)) != x, and no f32 field holds a NaN", s, size);
    opgen::opaque::Values w;
    const opgen::Status t = opgen::opaque::decode(again.data(), again.size(), Rules::kDescriptor,
                                                  Rules::kDescriptorFields, Rules::kFingerprint, Rules::kName, &w);
    if (!t.ok() || !same(Rules::kDescriptor, Rules::kDescriptorFields, v, w)) {
      fail(Rules::kName, "decode(encode(decode(x))) != decode(x)", t, size);
    }
    return true;
  }
  if (s.kind() != opgen::ErrorKind::kInvalidArgument) fail(Rules::kName, "a rejection is not kInvalidArgument", s, size);
  if (s.message().find(std::string(Rules::kName) + ": ") != 0) fail(Rules::kName, "a rejection does not name the op", s, size);
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using SimpleAdd = opgen_ops::simple_add::Rules;
  // Exactly sized: new char[0] is a valid, zero-length allocation.
  std::unique_ptr<char[]> buf(new char[size]);
  if (size) std::memcpy(buf.get(), data, size);

  const bool accepted = check<SimpleAdd>(buf.get(), size);
  const size_t fixed = opgen::opaque::fixed_size(SimpleAdd::kDescriptor, SimpleAdd::kDescriptorFields);
  const std::string header = opgen::opaque::header(fixed, SimpleAdd::kFingerprint);
  const bool well_formed = size == fixed && std::memcmp(buf.get(), header.data(), opgen::opaque::kHeaderSize) == 0;
  if (accepted != well_formed) {
    fail("simple_add", accepted ? "a malformed descriptor was accepted" : "a well-formed descriptor was rejected",
         opgen::Status::Ok(), size);
  }
  check<opgen_ops::flip::Rules>(buf.get(), size);

  // The null-pointer path: (nullptr, 0) is a short descriptor, never a crash.
  if (size == 0 && check<SimpleAdd>(nullptr, 0)) fail("simple_add", "a null, empty descriptor was accepted", {}, 0);
  return 0;
}
