#include "opgen/shape_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

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

std::string scalar_mismatch(const char* op, const char* role, const char* tensor, const int64_t* dims,
                            size_t rank) {
  return std::string(op) + ": " + role + " '" + tensor + "' has shape " + shape_text(dims, rank) +
         "; the spec declares a scalar: [] or [1]";
}

std::string dim_mismatch(const char* op, const char* role, const char* tensor,
                         const int64_t* dims, size_t rank, size_t axis, int64_t expected,
                         const char* expected_because, const char* declared) {
  return std::string(op) + ": " + role + " '" + tensor + "' has shape " + shape_text(dims, rank) +
         "; dimension " + std::to_string(axis) + " must be " + std::to_string(expected) + " (" +
         expected_because + "); the spec declares " + declared;
}

int64_t element_count(const int64_t* dims, size_t rank) {
  bool empty = false;
  for (size_t i = 0; i < rank; ++i) {
    if (dims[i] < 0) return -1;
    empty = empty || dims[i] == 0;
  }
  if (empty) return 0;
  int64_t n = 1;
  for (size_t i = 0; i < rank; ++i) {
    if (__builtin_mul_overflow(n, dims[i], &n)) return -1;
  }
  return n;
}

bool row_major_strides(const int64_t* dims, size_t rank, int64_t* strides) {
  int64_t n = 1;
  for (size_t d = rank; d-- > 0;) {
    strides[d] = n;
    if (d > 0 && __builtin_mul_overflow(n, std::max<int64_t>(dims[d], 1), &n)) return false;
  }
  return true;
}


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

std::string number_text(int64_t v) { return std::to_string(v); }

std::string number_text(double v) {
  // The shortest text that reads back to `v`, as Python's repr writes it.
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";  // a real looks like one: 1.0
  return s;
}

std::string attr_out_of_range(const char* op, const char* attr, const std::string& value, const char* range) {
  return std::string(op) + ": attribute '" + attr + "' = " + value + " must be " + range;
}

std::string attr_element_out_of_range(const char* op, const char* attr, size_t index, const std::string& value,
                                      const char* range) {
  return std::string(op) + ": attribute '" + attr + "' element " + std::to_string(index) + " = " + value +
         " must be " + range;
}

std::string attr_repeated(const char* op, const char* attr, int64_t value, size_t first, size_t again) {
  return std::string(op) + ": attribute '" + attr + "' lists " + std::to_string(value) + " twice (element " +
         std::to_string(first) + " and element " + std::to_string(again) + "); its elements must differ";
}

std::string attr_size_mismatch(const char* op, const char* attr, size_t size, int64_t expected) {
  return std::string(op) + ": attribute '" + attr + "' has " + std::to_string(size) +
         " elements; the spec fixes its size at " + std::to_string(expected);
}

std::string enum_unknown(const char* op, const char* attr, const char* value, size_t value_size,
                         const char* values) {
  // The value comes from the caller: show at most 64 bytes of it, printable.
  std::string shown;
  for (size_t i = 0; i < value_size && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    shown += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (value_size > 64) shown += "...";
  return std::string(op) + ": attribute '" + attr + "' is '" + shown + "'; it must be one of " + values;
}

std::string dtype_attr_refused(const char* op, const char* attr, const std::string& got, const std::string& allowed) {
  return std::string(op) + ": attribute '" + attr + "' is " + got + "; it must be one of " + allowed;
}

std::string enum_index_out_of_range(const char* op, const char* attr, int64_t index, size_t count,
                                    const char* values) {
  return std::string(op) + ": attribute '" + attr + "' has index " + std::to_string(index) + "; it has " +
         std::to_string(count) + " values (" + values + ")";
}

std::string presence_error(const char* op, int64_t present, size_t optional_count, size_t operands) {
  if (present < 0 || (optional_count < 63 && present >> optional_count != 0)) {
    return std::string(op) + ": the presence mask " + std::to_string(present) + " names inputs beyond the op's " +
           std::to_string(optional_count) + " optional input(s)";
  }
  const size_t named = present_count(present);
  if (named != operands) {
    return std::string(op) + ": the presence mask names " + std::to_string(named) + " optional input(s), but " +
           std::to_string(operands) + " operand(s) follow the required inputs";
  }
  return {};
}

size_t present_count(int64_t present) {
  size_t n = 0;
  for (uint64_t m = static_cast<uint64_t>(present); m != 0; m &= m - 1) ++n;
  return n;
}

std::string dim_error(const char* op, const char* tensor, const char* declared, const char* expression,
                      const CheckedDim& d) {
  const std::string who = std::string(op) + ": " + tensor;
  switch (d.failure()) {
    case CheckedDim::Failure::kInexact:
      return who + " is declared " + declared + ", but " + std::to_string(d.numerator()) +
             " is not divisible by " + std::to_string(d.denominator());
    case CheckedDim::Failure::kOverflow:
      return who + " has a dimension " + expression + " that overflows int64";
    case CheckedDim::Failure::kNone:
      break;
  }
  if (d.value() < 0) return who + " has a dimension " + expression + " = " + std::to_string(d.value()) + " < 0";
  return {};
}

std::string constraint_failed(const char* op, const char* constraint,
                              std::initializer_list<std::pair<const char*, int64_t>> values) {
  std::string out = std::string(op) + ": the spec requires " + constraint + ", but ";
  bool first = true;
  for (const auto& [name, value] : values) {
    out += std::string(first ? "" : ", ") + name + " = " + std::to_string(value);
    first = false;
  }
  return out;
}

std::string too_many_elements(const char* op, const char* tensor, const char* declared, const int64_t* dims,
                              size_t rank) {
  return std::string(op) + ": " + tensor + " " + declared + " = " + shape_text(dims, rank) +
         " would have more than 2^63 - 1 elements";
}

}  // namespace opgen
