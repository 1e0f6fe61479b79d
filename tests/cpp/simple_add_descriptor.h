// simple_add's legacy descriptor (N: i64, alpha: f32) as the tests write and
// read it, through the codec every legacy shim uses (opgen/opaque.h) and
// the op's generated field list (opgen_ops/simple_add_rules.h).
#pragma once

#include <cstdint>
#include <string>

#include "opgen/opaque.h"
#include "opgen_ops/simple_add_rules.h"

namespace sa {

using Rules = opgen_ops::simple_add::Rules;

struct Descriptor {
  int64_t N;
  float alpha;
};

inline const size_t kOpaqueSize = opgen::opaque::fixed_size(Rules::kDescriptor, Rules::kDescriptorFields);
inline constexpr uint64_t kOpaqueFingerprint = Rules::kFingerprint;

inline std::string encode_opaque(const Descriptor& d) {
  opgen::opaque::Values v;
  v.symbols[0] = d.N;
  v.symbol_count = 1;
  v.attrs[0].f = d.alpha;
  v.attr_count = 1;
  return opgen::opaque::encode(Rules::kDescriptor, Rules::kDescriptorFields, Rules::kFingerprint, v);
}

// Leaves `*d` alone when the descriptor is refused.
inline opgen::Status decode_opaque(const char* data, size_t size, Descriptor* d) {
  opgen::opaque::Values v;
  opgen::Status s = opgen::opaque::decode(data, size, Rules::kDescriptor, Rules::kDescriptorFields,
                                          Rules::kFingerprint, Rules::kName, &v);
  if (s.ok()) *d = {v.symbols[0], static_cast<float>(v.attrs[0].f)};
  return s;
}

}  // namespace sa
