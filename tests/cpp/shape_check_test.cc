// opgen/shape_check.h: the dense row-major strides that the binder, the
// in-place rule and the torch kernel's outputs share.
#include <gtest/gtest.h>

#include <cstdint>

#include "opgen/shape_check.h"

namespace {

TEST(RowMajorStrides, AreTheProductsOfTheDimensionsInsideEach) {
  const int64_t dims[] = {2, 3, 4};
  int64_t strides[3] = {};
  ASSERT_TRUE(opgen::row_major_strides(dims, 3, strides));
  EXPECT_EQ(strides[0], 12);
  EXPECT_EQ(strides[1], 4);
  EXPECT_EQ(strides[2], 1);
}

// As torch makes them: a dimension of 0 counts as 1, so an empty tensor's
// strides are those of its nonzero dimensions.
TEST(RowMajorStrides, ADimensionOfZeroCountsAsOne) {
  const int64_t dims[] = {5, 0, 3};
  int64_t strides[3] = {};
  ASSERT_TRUE(opgen::row_major_strides(dims, 3, strides));
  EXPECT_EQ(strides[0], 3);
  EXPECT_EQ(strides[1], 3);
  EXPECT_EQ(strides[2], 1);
}

TEST(RowMajorStrides, AStridePastAnInt64IsRefused) {
  const int64_t dims[] = {0, int64_t{1} << 40, int64_t{1} << 40};
  int64_t strides[3] = {};
  EXPECT_FALSE(opgen::row_major_strides(dims, 3, strides));
  const int64_t fits[] = {int64_t{1} << 40, int64_t{1} << 22};  // the outermost dimension multiplies no stride
  EXPECT_TRUE(opgen::row_major_strides(fits, 2, strides));
  EXPECT_EQ(strides[0], int64_t{1} << 22);
}

}  // namespace
