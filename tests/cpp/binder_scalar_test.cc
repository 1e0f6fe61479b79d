// opgen/binder.h: an input the spec declares [] (a scalar) takes a tensor of
// one element as [] or [1], as vLLM passes its scales; any other shape is
// refused by name. An output that updates such an input has the shape given.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "opgen/binder.h"

namespace {

// A Source of one input, of `dims`, and outputs sized as the binder says.
class ScalarSource : public opgen::Source {
 public:
  explicit ScalarSource(std::vector<int64_t> dims) : dims_(std::move(dims)) {
    ref_.dtype = opgen::DType::kF32;
    ref_.rank = dims_.size();
    ref_.dims = opgen::given_dims(dims_.data());
    ref_.data = &value_;
  }
  const opgen::TensorRef* input(size_t) override { return &ref_; }
  opgen::Status attr(size_t, const char*, opgen::AttrKind, opgen::AttrValue*) override { return {}; }
  opgen::Status output(size_t, const char*, const char*, opgen::DType, const int64_t* dims, size_t rank,
                       void** data) override {
    output_dims.assign(dims, dims + rank);
    *data = &value_;
    return {};
  }
  opgen::Status workspace(size_t, const char* const*, size_t, size_t, void**) override { return {}; }

  std::vector<int64_t> output_dims;

 private:
  std::vector<int64_t> dims_;
  opgen::TensorRef ref_;
  float value_ = 2.5f;
};

// Binds input 0 of the spec's shape [] (and, with `updated`, an output that
// updates it in place); the binder's status.
opgen::Status bind(ScalarSource& source, bool updated, const float** scale) {
  opgen::Binder b("quant", source);
  b.input(0, "scale_ub", "[]", 0, false, scale, updated ? opgen::Binder::kUpdated : opgen::Binder::kRequired)
      .layout(opgen::Layout::kContiguous);
  if (updated) {
    float* out = nullptr;
    b.output_aliasing(0, "scale_out", "[]", false, {}, &out, 0, scale);
  }
  return b.status();
}

TEST(BinderScalarInput, TakesAShapeOfNoDimensionOrOne) {
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{}, std::vector<int64_t>{1}}) {
    ScalarSource source(dims);
    const float* scale = nullptr;
    opgen::Status s = bind(source, false, &scale);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_NE(scale, nullptr);
    EXPECT_EQ(*scale, 2.5f);  // the one element, through the pointer
  }
}

TEST(BinderScalarInput, RefusesAnyOtherShapeByName) {
  const std::vector<std::pair<std::vector<int64_t>, std::string>> cases = {
      {{2}, "quant: input 'scale_ub' has shape [2]; the spec declares a scalar: [] or [1]"},
      {{1, 1}, "quant: input 'scale_ub' has shape [1, 1]; the spec declares a scalar: [] or [1]"},
      {{0}, "quant: input 'scale_ub' has shape [0]; the spec declares a scalar: [] or [1]"},
  };
  for (const auto& [dims, message] : cases) {
    ScalarSource source(dims);
    const float* scale = nullptr;
    opgen::Status s = bind(source, false, &scale);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.message(), message);
  }
}

TEST(BinderScalarInput, AnOutputThatUpdatesItHasTheShapeGiven) {
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{}, std::vector<int64_t>{1}}) {
    ScalarSource source(dims);
    const float* scale = nullptr;
    opgen::Status s = bind(source, true, &scale);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(source.output_dims, dims);
  }
}

}  // namespace
