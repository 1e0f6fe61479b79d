#include "opgen/shape_check.h"

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
