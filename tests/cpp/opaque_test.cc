// The legacy opaque descriptor of simple_add (the codec of opgen/opaque.h over
// the op's generated fields), and the model's fingerprints that guard it.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>

#include "commands/load_spec.h"
#include "model/model.h"
#include "opgen/opaque.h"
#include "opgen/status.h"
#include "simple_add_descriptor.h"
#include "test_util.h"

namespace {

using opgen::ErrorKind;

// A descriptor that decode_opaque must leave alone when it fails.
constexpr int64_t kUntouchedN = 0x5A5A5A5A5A5A5A5Aull;
constexpr float kUntouchedAlpha = -1234.5f;

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

// The seed is printed so that a failure can be replayed.
std::mt19937 seeded_rng(uint32_t* seed_out) {
  std::random_device rd;
  *seed_out = rd();
  return std::mt19937(*seed_out);
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Decodes `size` bytes at `data` and expects kInvalidArgument with a message
// containing `text`; the output descriptor must not be written.
void expect_rejected(const char* data, size_t size, const std::string& text) {
  sa::Descriptor d{kUntouchedN, kUntouchedAlpha};
  const opgen::Status s = sa::decode_opaque(data, size, &d);
  EXPECT_FALSE(s.ok()) << "size " << size;
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument) << "size " << size << ": " << s.message();
  EXPECT_NE(s.message().find("simple_add: opaque descriptor"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(text), std::string::npos)
      << "size " << size << ": \"" << s.message() << "\" lacks \"" << text << "\"";
  EXPECT_EQ(d.N, kUntouchedN) << "a rejected descriptor was partly decoded";
  EXPECT_EQ(float_bits(d.alpha), float_bits(kUntouchedAlpha)) << "a rejected descriptor was partly decoded";
}

std::string valid_blob() { return sa::encode_opaque(sa::Descriptor{1024, 0.5f}); }

TEST(SimpleAddOpaque, LayoutMatchesTheDocumentedFormat) {
  EXPECT_EQ(sa::kOpaqueSize, opgen::opaque::kHeaderSize + sizeof(int64_t) + sizeof(float));
  const std::string blob = sa::encode_opaque(sa::Descriptor{0x0102030405060708, 2.0f});
  ASSERT_EQ(blob.size(), sa::kOpaqueSize);
  EXPECT_EQ(blob.substr(0, 4), "OPGN");
  EXPECT_EQ(opgen::opaque::read_field<uint16_t>(blob.data(), 4), opgen::opaque::kLayoutVersion);
  EXPECT_EQ(opgen::opaque::read_field<uint16_t>(blob.data(), 6), 0);
  EXPECT_EQ(opgen::opaque::read_field<uint64_t>(blob.data(), 8), sa::kOpaqueFingerprint);
  // Little-endian N at offset 16, alpha at 24.
  EXPECT_EQ(static_cast<unsigned char>(blob[16]), 0x08);
  EXPECT_EQ(static_cast<unsigned char>(blob[23]), 0x01);
  EXPECT_EQ(opgen::opaque::read_field<float>(blob.data(), 24), 2.0f);
}

TEST(SimpleAddOpaque, RoundTripsRandomDescriptors) {
  uint32_t seed;
  std::mt19937 rng = seeded_rng(&seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::uniform_int_distribution<int64_t> any_n(std::numeric_limits<int64_t>::min(),
                                               std::numeric_limits<int64_t>::max());
  std::uniform_int_distribution<int64_t> small_n(0, 1 << 20);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_real_distribution<float> any_alpha(-1e6f, 1e6f);
  for (int i = 0; i < 20000; ++i) {
    sa::Descriptor in{};
    in.N = (i % 2) ? any_n(rng) : small_n(rng);
    if (i % 3 == 0) {
      // Any bit pattern, infinities included; a NaN decodes as a NaN (the
      // codec widens an f32 to a double, which may quiet a signaling one).
      const uint32_t bits = any_bits(rng);
      std::memcpy(&in.alpha, &bits, sizeof bits);
    } else {
      in.alpha = any_alpha(rng);
    }
    const std::string blob = sa::encode_opaque(in);
    ASSERT_EQ(blob.size(), sa::kOpaqueSize);
    sa::Descriptor out{kUntouchedN, kUntouchedAlpha};
    const opgen::Status s = sa::decode_opaque(blob.data(), blob.size(), &out);
    ASSERT_TRUE(s.ok()) << "iteration " << i << ": " << s.message();
    ASSERT_EQ(out.N, in.N) << "iteration " << i;
    if (std::isnan(in.alpha)) {
      ASSERT_TRUE(std::isnan(out.alpha)) << "iteration " << i;
    } else {
      ASSERT_EQ(float_bits(out.alpha), float_bits(in.alpha)) << "iteration " << i << ", alpha " << in.alpha;
    }
  }
}

TEST(SimpleAddOpaque, RoundTripsEdgeValues) {
  const int64_t ns[] = {0, 1, -1, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  const float alphas[] = {0.0f, -0.0f, 1.0f, std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  for (int64_t n : ns) {
    for (float alpha : alphas) {
      const std::string blob = sa::encode_opaque(sa::Descriptor{n, alpha});
      sa::Descriptor out{};
      ASSERT_TRUE(sa::decode_opaque(blob.data(), blob.size(), &out).ok());
      EXPECT_EQ(out.N, n);
      if (std::isnan(alpha)) EXPECT_TRUE(std::isnan(out.alpha));
      else EXPECT_EQ(float_bits(out.alpha), float_bits(alpha));
    }
  }
}

TEST(SimpleAddOpaque, RejectsEveryTruncation) {
  const std::string blob = valid_blob();
  for (size_t len = 0; len < blob.size(); ++len) {
    SCOPED_TRACE("length " + std::to_string(len));
    // A copy of exactly `len` bytes, so a read past the end is a sanitizer error.
    const std::string cut = blob.substr(0, len);
    if (len < opgen::opaque::kHeaderSize) {
      expect_rejected(cut.data(), len,
                      "is " + std::to_string(len) + " bytes, shorter than its 16-byte header (expected " +
                          std::to_string(sa::kOpaqueSize) + " bytes)");
    } else {
      expect_rejected(cut.data(), len,
                      "is " + std::to_string(len) + " bytes; layout 1 of this op is " +
                          std::to_string(sa::kOpaqueSize) + " bytes");
    }
  }
}

TEST(SimpleAddOpaque, RejectsOneByteTooLong) {
  const std::string blob = valid_blob() + '\0';
  expect_rejected(blob.data(), blob.size(),
                  "is " + std::to_string(sa::kOpaqueSize + 1) + " bytes; layout 1 of this op is " +
                      std::to_string(sa::kOpaqueSize) + " bytes");
}

TEST(SimpleAddOpaque, RejectsAWrongMagic) {
  for (size_t i = 0; i < 4; ++i) {
    std::string blob = valid_blob();
    blob[i] = static_cast<char>(blob[i] ^ 0x20);  // 'O' -> 'o', ...
    SCOPED_TRACE("byte " + std::to_string(i));
    expect_rejected(blob.data(), blob.size(), "does not start with the opgen magic 'OPGN'");
  }
}

TEST(SimpleAddOpaque, RejectsAWrongLayoutVersion) {
  for (uint16_t version : {uint16_t{0}, uint16_t{2}, uint16_t{0x0100}, uint16_t{0xFFFF}}) {
    std::string blob = valid_blob();
    opgen::opaque::write_field<uint16_t>(blob, 4, version);
    SCOPED_TRACE("version " + std::to_string(version));
    expect_rejected(blob.data(), blob.size(),
                    "has layout version " + std::to_string(version) + "; this build reads version 1");
  }
}

TEST(SimpleAddOpaque, RejectsAWrongFingerprint) {
  for (int bit = 0; bit < 64; ++bit) {
    std::string blob = valid_blob();
    const uint64_t wrong = sa::kOpaqueFingerprint ^ (uint64_t{1} << bit);
    opgen::opaque::write_field<uint64_t>(blob, 8, wrong);
    SCOPED_TRACE("bit " + std::to_string(bit));
    expect_rejected(blob.data(), blob.size(),
                    "has fingerprint " + hex(wrong) + ", expected " + hex(sa::kOpaqueFingerprint));
  }
}

TEST(SimpleAddOpaque, RejectsANullPointer) {
  for (size_t size : {size_t{1}, sa::kOpaqueSize, size_t{4096}}) {
    SCOPED_TRACE("size " + std::to_string(size));
    expect_rejected(nullptr, size, "is a null pointer");
  }
  // No bytes at all is merely too short.
  expect_rejected(nullptr, 0, "is 0 bytes, shorter than its 16-byte header");
}

// A bool field holds 0 or 1, as encode writes it: any other byte is refused,
// so that one descriptor has one spelling.
TEST(OpaqueCodec, ABoolFieldHoldsZeroOrOne) {
  const opgen::opaque::Field fields[] = {{opgen::opaque::Field::kAttr, "flag", opgen::AttrKind::kBool}};
  constexpr uint64_t kFingerprint = 0x0123456789abcdefull;
  for (bool flag : {false, true}) {
    opgen::opaque::Values in;
    in.attrs[0].b = flag;
    in.attr_count = 1;
    const std::string blob = opgen::opaque::encode(fields, 1, kFingerprint, in);
    opgen::opaque::Values out;
    ASSERT_TRUE(opgen::opaque::decode(blob.data(), blob.size(), fields, 1, kFingerprint, "op", &out).ok());
    EXPECT_EQ(out.attrs[0].b, flag);
  }
  std::string blob = opgen::opaque::encode(fields, 1, kFingerprint, opgen::opaque::Values{});
  blob.back() = 2;
  opgen::opaque::Values out;
  const opgen::Status s = opgen::opaque::decode(blob.data(), blob.size(), fields, 1, kFingerprint, "op", &out);
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(s.message(), "op: opaque descriptor field 'flag' (bool) holds 2, not 0 or 1");
}

// ---------------------------------------------------------------------------
// Fingerprints from the model
// ---------------------------------------------------------------------------

opgen::gen::Attr attr(const std::string& name, opgen::gen::AttrType type) {
  opgen::gen::Attr a;
  a.name = name;
  a.type = type;
  return a;
}

// The model of simple_add, by hand: one symbol N, one f32 attribute alpha.
opgen::gen::Op simple_add_by_hand() {
  opgen::gen::Op op;
  op.name = "simple_add";
  op.symbols = {{"N", 0, 0}};
  op.attrs = {attr("alpha", opgen::gen::AttrType::kF32)};
  return op;
}

TEST(OpaqueFingerprint, TheGeneratedHeaderMatchesTheModel) {
  EXPECT_EQ(simple_add_by_hand().opaque_fingerprint("opgen_ops"), sa::kOpaqueFingerprint);

  opgen::gen::Diagnostics diags;
  std::optional<opgen::gen::Op> op = opgen::gen::load_op_spec(
      (opgen_test::source_dir() / "specs" / "simple_add.yaml").string(), "specs/simple_add.yaml", diags);
  ASSERT_TRUE(op.has_value());
  EXPECT_EQ(op->opaque_fingerprint("opgen_ops"), sa::kOpaqueFingerprint)
      << hex(op->opaque_fingerprint("opgen_ops")) << " vs " << hex(sa::kOpaqueFingerprint);
}

TEST(OpaqueFingerprint, ChangesWithEveryFieldOfTheLayout) {
  const opgen::gen::Op base = simple_add_by_hand();
  const uint64_t fp = base.opaque_fingerprint("opgen_ops");

  opgen::gen::Op type_changed = base;
  type_changed.attrs[0].type = opgen::gen::AttrType::kF64;
  EXPECT_NE(type_changed.opaque_fingerprint("opgen_ops"), fp) << "attribute type f32 -> f64";
  for (opgen::gen::AttrType t : {opgen::gen::AttrType::kBool, opgen::gen::AttrType::kI32, opgen::gen::AttrType::kI64}) {
    opgen::gen::Op other = base;
    other.attrs[0].type = t;
    EXPECT_NE(other.opaque_fingerprint("opgen_ops"), fp) << opgen::gen::info(t).name;
  }

  opgen::gen::Op renamed = base;
  renamed.attrs[0].name = "beta";
  EXPECT_NE(renamed.opaque_fingerprint("opgen_ops"), fp) << "attribute name alpha -> beta";

  opgen::gen::Op symbol_renamed = base;
  symbol_renamed.symbols[0].symbol = "M";
  EXPECT_NE(symbol_renamed.opaque_fingerprint("opgen_ops"), fp) << "symbol N -> M";

  opgen::gen::Op extra_attr = base;
  extra_attr.attrs.push_back(attr("beta", opgen::gen::AttrType::kF32));
  EXPECT_NE(extra_attr.opaque_fingerprint("opgen_ops"), fp) << "one more attribute";

  opgen::gen::Op swapped = extra_attr;
  std::swap(swapped.attrs[0], swapped.attrs[1]);
  EXPECT_NE(swapped.opaque_fingerprint("opgen_ops"), extra_attr.opaque_fingerprint("opgen_ops"))
      << "attribute order";

  opgen::gen::Op other_op = base;
  other_op.name = "simple_sub";
  EXPECT_NE(other_op.opaque_fingerprint("opgen_ops"), fp) << "op name";
  EXPECT_NE(base.opaque_fingerprint("other_pkg"), fp) << "package name";

  // Fields outside the descriptor do not change it.
  opgen::gen::Op documented = base;
  documented.doc = "another doc";
  documented.attrs[0].doc = "another attribute doc";
  documented.platforms = {opgen::gen::Platform::kCpu};
  EXPECT_EQ(documented.opaque_fingerprint("opgen_ops"), fp);
}

TEST(OpaqueFingerprint, DiffersBetweenSpecsThatChangeAnAttribute) {
  auto spec = [](const std::string& attr_line) {
    return "opgen: 1\nname: fp_op\ninputs:\n  x: {dtype: f32, shape: [N]}\n"
           "outputs:\n  y: {dtype: f32, shape: [N]}\nattrs:\n  " + attr_line + "\n";
  };
  auto fingerprint = [](const std::string& text) -> uint64_t {
    opgen_test::TempDir dir;
    opgen_test::write_file(dir / "fp_op.yaml", text);
    opgen::gen::Diagnostics diags;
    std::optional<opgen::gen::Op> op = opgen::gen::load_op_spec((dir / "fp_op.yaml").string(), "fp_op.yaml", diags);
    EXPECT_TRUE(op.has_value()) << text;
    return op ? op->opaque_fingerprint("opgen_ops") : 0;
  };
  const uint64_t f32 = fingerprint(spec("scale: {type: f32, default: 1.0}"));
  const uint64_t f64 = fingerprint(spec("scale: {type: f64, default: 1.0}"));
  const uint64_t renamed = fingerprint(spec("factor: {type: f32, default: 1.0}"));
  const uint64_t new_default = fingerprint(spec("scale: {type: f32, default: 2.0}"));
  EXPECT_NE(f32, f64);
  EXPECT_NE(f32, renamed);
  EXPECT_NE(f64, renamed);
  EXPECT_EQ(f32, new_default) << "a default is not part of the layout";
}

TEST(OpaqueFingerprint, IsFnv1a64) {
  // Reference values of 64-bit FNV-1a.
  EXPECT_EQ(opgen::gen::fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(opgen::gen::fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(opgen::gen::fnv1a64("foobar"), 0x85944171f73967e8ull);
}

}  // namespace
