// opgen/binder.h: what the binder answers besides the buffers, which the
// Python entry points build a call from (opgen/shape_source.h, _C.check):
// the kind of a refusal (opgen/status.h), each type variable's dtype, and
// each workspace's shape and dtype on every platform.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "opgen/binder.h"

namespace {

// A Source of one f16 input of `dims`, on `device`, recording the workspace shapes it is told.
class OneInput : public opgen::Source {
 public:
  OneInput(std::vector<int64_t> dims, opgen::Device device) : dims_(std::move(dims)), device_(device) {
    ref_.dtype = opgen::DType::kF16;
    ref_.rank = dims_.size();
    ref_.dims = opgen::given_dims(dims_.data());
  }
  const opgen::TensorRef* input(size_t) override { return &ref_; }
  opgen::Status attr(size_t, const char*, opgen::AttrKind, opgen::AttrValue*) override { return {}; }
  opgen::Status output(size_t, const char*, const char*, opgen::DType, const int64_t*, size_t,
                       void** data) override {
    *data = nullptr;
    return {};
  }
  opgen::Device device() const override { return device_; }
  opgen::Status workspace(size_t, const char* const* names, size_t, size_t bytes, void** data) override {
    allocated.push_back(std::string(names[0]) + " " + std::to_string(bytes));
    *data = nullptr;
    return {};
  }
  void workspace_shape(size_t i, const char* name, opgen::DType dtype, const int64_t* dims, size_t rank) override {
    shapes.push_back(std::to_string(i) + " " + name + " " + opgen::dtype_name(dtype) + " " + std::to_string(rank) +
                     "d");
    for (size_t k = 0; k < rank; ++k) shapes.back() += " " + std::to_string(dims[k]);
  }

  std::vector<std::string> allocated, shapes;

 private:
  std::vector<int64_t> dims_;
  opgen::Device device_;
  opgen::TensorRef ref_;
};

TEST(BinderAnswers, ADtypeRefusalIsAWrongTypeAndAShapeRefusalAnInvalidArgument) {
  OneInput source({4, 8}, opgen::Device::kCpu);
  opgen::Binder dtype("op", source);
  int index = 0;
  dtype.type_var(0, "T", 0, "x", {opgen::DType::kF32, opgen::DType::kF64}, &index);
  ASSERT_FALSE(dtype.ok());
  EXPECT_EQ(dtype.status().kind(), opgen::ErrorKind::kWrongType) << dtype.status().message();
  EXPECT_EQ(dtype.status().message(), "op: input 'x' has dtype f16; T must be one of f32, f64");

  opgen::Binder shape("op", source);
  const opgen::f16* x = nullptr;
  shape.input(0, "x", "[N]", 1, false, &x);
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().kind(), opgen::ErrorKind::kInvalidArgument) << shape.status().message();
  EXPECT_EQ(opgen::Status::Internal("boom").kind(), opgen::ErrorKind::kInternal);
  EXPECT_EQ(opgen::Status::Ok().kind(), opgen::ErrorKind::kOk);
}

TEST(BinderAnswers, EveryTypeVariableIsNamedWithItsDtype) {
  OneInput source({4, 8}, opgen::Device::kCpu);
  opgen::Binder b("op", source);
  int index = -1;
  const opgen::DType t = b.type_var(0, "T", 0, "x", {opgen::DType::kF32, opgen::DType::kF16}, &index);
  b.bind_type("S", opgen::derived(t, {{opgen::DType::kF16, opgen::DType::kF32}}));
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(index, 1);
  ASSERT_EQ(b.type_count(), 2u);
  EXPECT_EQ(std::string(b.type_name(0)), "T");
  EXPECT_EQ(b.type(0), opgen::DType::kF16);
  EXPECT_EQ(std::string(b.type_name(1)), "S");
  EXPECT_EQ(b.type(1), opgen::DType::kF32);
}

TEST(BinderAnswers, EveryWorkspaceShapeIsToldOnEveryPlatformAndOnlyItsOwnAllocated) {
  const unsigned cuda = opgen::device_bit(opgen::Device::kCuda);
  for (opgen::Device device : {opgen::Device::kCpu, opgen::Device::kCuda}) {
    OneInput source({2, 3, 8}, device);
    opgen::Binder b("op", source);
    const opgen::f16* x = nullptr;
    int64_t batch = 0, d = 0;
    b.input(0, "x", "[..., D]", 1, true, &x).batch(&batch).bind(0, 0, "D", &d);
    float* rows = nullptr;
    double* sums = nullptr;
    b.workspace(0, "rows", true, {}, &rows);
    b.workspace(1, "sums", false, {2, d}, &sums, cuda);
    b.allocate();
    ASSERT_TRUE(b.ok()) << b.status().message();
    EXPECT_EQ(source.shapes, (std::vector<std::string>{"0 rows f32 2d 2 3", "1 sums f64 2d 2 8"}));
    if (device == opgen::Device::kCpu) {
      EXPECT_EQ(source.allocated, (std::vector<std::string>{"rows 24"}));
    } else {
      EXPECT_EQ(source.allocated, (std::vector<std::string>{"rows 24", "sums 128"}));
    }
  }
}

}  // namespace
