// The generated legacy CPU shim of simple_add (api_version 3), linked with
// the CPU body, run as XLA:CPU would run it. Failures reach XLA through
// XlaCustomCallStatusSetFailure, which the shim finds at run time with
// dlsym(RTLD_DEFAULT, ...); this executable defines and exports one
// (ENABLE_EXPORTS) that records the message, as XLA's records it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/model.h"
#include "opgen/opaque.h"
#include "opgen/xla_legacy_status.h"
#include "simple_add_descriptor.h"

// The test's stand-in for XLA's status object.
struct XlaCustomCallStatus_ {
  std::string message;
  bool failed = false;
  int calls = 0;
};

extern "C" {

__attribute__((visibility("default"))) void XlaCustomCallStatusSetFailure(
    XlaCustomCallStatus* status, const char* message, size_t message_len) {
  status->failed = true;
  status->message.assign(message, message_len);
  ++status->calls;
}

// Defined in generated/src/simple_add_xla.cc.
void opgen_ops_simple_add_cpu_legacy_v3(void* out, const void** in, const char* opaque,
                                        size_t opaque_len, XlaCustomCallStatus* status);

}  // extern "C"

namespace {


constexpr float kPoison = -7.25e30f;

// Inputs, a poisoned output and the descriptor for one call.
struct Call {
  std::vector<float> a, b, out;
  float alpha = 0;
  std::string opaque;

  Call(int64_t n, std::mt19937& rng) : a(n), b(n), out(n == 0 ? 1 : n, kPoison) {
    std::uniform_real_distribution<float> value(-100.0f, 100.0f);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = value(rng);
      b[i] = value(rng);
    }
    alpha = value(rng);
    opaque = sa::encode_opaque(sa::Descriptor{n, alpha});
  }

  XlaCustomCallStatus run() { return run(opaque.data(), opaque.size()); }
  XlaCustomCallStatus run(const char* data, size_t size) {
    XlaCustomCallStatus status;
    const void* in[] = {a.data(), b.data()};
    opgen_ops_simple_add_cpu_legacy_v3(out.data(), in, data, size, &status);
    return status;
  }

  void expect_output_untouched() const {
    size_t written = 0;
    for (float v : out) written += (v != kPoison);
    EXPECT_EQ(written, 0u) << "the kernel wrote " << written << " of " << out.size()
                           << " output elements after a failure";
  }
};

std::mt19937 seeded_rng() {
  std::random_device rd;
  const uint32_t seed = rd();
  std::printf("[          ] random seed %u\n", seed);
  return std::mt19937(seed);
}

void expect_failure_names_op(const XlaCustomCallStatus& status, const std::string& text) {
  EXPECT_TRUE(status.failed);
  EXPECT_EQ(status.calls, 1);
  EXPECT_EQ(status.message.rfind("opgen_ops_simple_add_legacy_v3: simple_add: ", 0), 0u) << status.message;
  EXPECT_NE(status.message.find(text), std::string::npos)
      << "\"" << status.message << "\" lacks \"" << text << "\"";
}

TEST(LegacyStatus, TheShimFindsThisExecutablesSetter) {
  // Without ENABLE_EXPORTS the setter is not in the dynamic symbol table and
  // every failure below would go to stderr instead.
  EXPECT_EQ(opgen::xla_legacy::failure_setter(), &XlaCustomCallStatusSetFailure);
}

TEST(LegacyStatus, ACorrectDescriptorRunsTheCpuBody) {
  std::mt19937 rng = seeded_rng();
  std::uniform_int_distribution<int64_t> length(1, 5000);
  for (int iteration = 0; iteration < 50; ++iteration) {
    const int64_t n = iteration < 3 ? iteration + 1 : length(rng);
    Call call(n, rng);
    const XlaCustomCallStatus status = call.run();
    ASSERT_FALSE(status.failed) << status.message;
    EXPECT_EQ(status.calls, 0);
    for (int64_t i = 0; i < n; ++i) {
      // The body's expression, in float: the results are identical.
      const float expected = call.a[i] + call.alpha * call.b[i];
      ASSERT_EQ(call.out[i], expected) << "N = " << n << ", i = " << i;
    }
  }
}

TEST(LegacyStatus, AnEmptyOutputIsNotWritten) {
  std::mt19937 rng = seeded_rng();
  Call call(0, rng);
  const XlaCustomCallStatus status = call.run();
  EXPECT_FALSE(status.failed) << status.message;
  call.expect_output_untouched();
}

TEST(LegacyStatus, AShortDescriptorFailsWithoutRunning) {
  std::mt19937 rng = seeded_rng();
  Call call(257, rng);
  for (size_t len : {size_t{0}, size_t{8}, opgen::opaque::kHeaderSize, sa::kOpaqueSize - 1}) {
    SCOPED_TRACE("length " + std::to_string(len));
    const std::string cut = call.opaque.substr(0, len);
    const XlaCustomCallStatus status = call.run(cut.data(), cut.size());
    expect_failure_names_op(status, "is " + std::to_string(len) + " bytes");
    call.expect_output_untouched();
  }
}

TEST(LegacyStatus, AForeignFingerprintFailsWithoutRunning) {
  std::mt19937 rng = seeded_rng();
  Call call(1000, rng);
  std::string foreign = call.opaque;
  // The descriptor of another op with the same fields (N: i64, alpha: f32).
  opgen::gen::Op other_op;
  other_op.name = "simple_sub";
  other_op.symbols = {{"N", 0, 0}};
  other_op.attrs.resize(1);
  other_op.attrs[0].name = "alpha";
  other_op.attrs[0].type = opgen::gen::AttrType::kF32;
  const uint64_t other = other_op.opaque_fingerprint("opgen_ops");
  ASSERT_NE(other, sa::kOpaqueFingerprint);
  opgen::opaque::write_field<uint64_t>(foreign, 8, other);
  const XlaCustomCallStatus status = call.run(foreign.data(), foreign.size());
  expect_failure_names_op(status, "fingerprint");
  EXPECT_NE(status.message.find("another op or to another revision"), std::string::npos) << status.message;
  call.expect_output_untouched();
}

TEST(LegacyStatus, AForeignMagicFailsWithoutRunning) {
  std::mt19937 rng = seeded_rng();
  Call call(64, rng);
  std::string foreign = call.opaque;
  std::memcpy(&foreign[0], "XLA!", 4);
  const XlaCustomCallStatus status = call.run(foreign.data(), foreign.size());
  expect_failure_names_op(status, "magic 'OPGN'");
  call.expect_output_untouched();
}

TEST(LegacyStatus, ANegativeSymbolFailsWithoutRunning) {
  std::mt19937 rng = seeded_rng();
  Call call(16, rng);
  const std::string opaque = sa::encode_opaque(sa::Descriptor{-5, 1.0f});
  const XlaCustomCallStatus status = call.run(opaque.data(), opaque.size());
  expect_failure_names_op(status, "shape symbol N = -5");
  call.expect_output_untouched();
}

// Where the error cannot reach XLA, the report on stderr says what the
// outputs hold: poison where the call was refused after they were bound,
// what they held before where it was refused earlier.
TEST(LegacyStatus, TheReportSaysWhatTheOutputsHold) {
  using opgen::xla_legacy::outputs_text;
  EXPECT_EQ(outputs_text({0, 2}),
            "the call was refused before its outputs were bound: they are left as they are (whatever the buffers "
            "held before, not poison)");
  EXPECT_EQ(outputs_text({2, 2}),
            "the call's outputs hold poison (every byte 0xFF: NaN in floating types, -1 in integers) where the "
            "descriptor gave their sizes");
  EXPECT_EQ(outputs_text({1, 3}),
            "the first 1 of the call's 3 outputs hold poison (every byte 0xFF: NaN in floating types, -1 in "
            "integers) where the descriptor gave their sizes; the others are left as they are");
  testing::internal::CaptureStderr();
  opgen::xla_legacy::report(nullptr, "target_v1", opgen::Status::InvalidArgument("op: refused"), {0, 1});
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "opgen: error: target_v1: op: refused\nopgen: the kernel was not run; " + outputs_text({0, 1}) +
                "; api_version 1 gives a custom call no way to return an error (use 4)\n");
}

}  // namespace
