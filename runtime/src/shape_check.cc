#include "opgen/shape_check.h"

#include <cstdio>

namespace opgen {

std::string shape_text(const int64_t* dims, size_t rank) {
  std::string out = "[";
  for (size_t i = 0; i < rank; ++i) {
    if (i) out += ", ";
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

std::string rank_mismatch(const char* op, const char* role, const char* tensor,
                          const int64_t* dims, size_t rank, const char* declared) {
  return std::string(op) + ": " + role + " '" + tensor + "' has rank " + std::to_string(rank) +
         " (shape " + shape_text(dims, rank) + "); the spec declares " + declared;
}

std::string dim_mismatch(const char* op, const char* role, const char* tensor,
                         const int64_t* dims, size_t rank, size_t axis, int64_t expected,
                         const char* expected_because, const char* declared) {
  return std::string(op) + ": " + role + " '" + tensor + "' has shape " + shape_text(dims, rank) +
         "; dimension " + std::to_string(axis) + " must be " + std::to_string(expected) + " (" +
         expected_because + "); the spec declares " + declared;
}

int64_t element_count(const int64_t* dims, size_t rank) {
  int64_t n = 1;
  for (size_t i = 0; i < rank; ++i) {
    if (dims[i] < 0) return -1;
    if (dims[i] != 0 && n > INT64_MAX / dims[i]) return -1;
    n *= dims[i];
  }
  return n;
}

}  // namespace opgen

namespace opgen {

bool same_dims(const int64_t* a, size_t a_rank, const int64_t* b, size_t b_rank) {
  if (a_rank != b_rank) return false;
  for (size_t i = 0; i < a_rank; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

std::string batch_mismatch(const char* op, const char* role, const char* tensor,
                           const int64_t* dims, size_t rank, size_t lead, const int64_t* batch,
                           size_t batch_rank, const char* batch_source) {
  return std::string(op) + ": " + role + " '" + tensor + "' has shape " + shape_text(dims, rank) +
         "; its leading dimensions " + shape_text(dims, lead) + " (the spec's '...') must equal " +
         "those of input '" + batch_source + "', " + shape_text(batch, batch_rank);
}

std::string inexact_division(const char* op, const char* tensor, const char* declared,
                             int64_t numerator, int64_t denominator) {
  return std::string(op) + ": output '" + tensor + "' is declared " + declared + ", but " +
         std::to_string(numerator) + " is not divisible by " + std::to_string(denominator);
}

std::string attr_out_of_range(const char* op, const char* attr, double value, const char* min,
                              const char* max) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  return std::string(op) + ": attribute '" + attr + "' = " + buf + " is outside its range [" + min +
         ", " + max + "]";
}

}  // namespace opgen

namespace opgen {

std::string negative_dim(const char* op, const char* tensor, const char* expression, int64_t value) {
  return std::string(op) + ": output '" + tensor + "' has a dimension " + expression + " = " +
         std::to_string(value) + " < 0";
}

}  // namespace opgen
