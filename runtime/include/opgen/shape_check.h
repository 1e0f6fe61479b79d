// Messages for the shape checks that generated handlers run before a kernel
// body sees its arguments. They name the op, the tensor, the axis and the
// spec's declared shape, so the caller can tell which argument is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "opgen/checked_dim.h"

namespace opgen {

// "[8, 3]"
std::string shape_text(const int64_t* dims, size_t rank);

// "simple_add: input 'a' has rank 2 (shape [8, 3]); the spec declares [N]"
std::string rank_mismatch(const char* op, const char* role, const char* tensor,
                          const int64_t* dims, size_t rank, const char* declared);

// "quant: input 'scale_ub' has shape [2]; the spec declares a scalar: [] or [1]"
// (an input the spec declares [] takes a tensor of one element as [] or [1],
// as vLLM passes its scales)
std::string scalar_mismatch(const char* op, const char* role, const char* tensor, const int64_t* dims,
                            size_t rank);

// "simple_add: input 'b' has shape [7]; dimension 0 must be N = 8 (bound by
// input 'a' dimension 0); the spec declares [N]"
std::string dim_mismatch(const char* op, const char* role, const char* tensor,
                         const int64_t* dims, size_t rank, size_t axis, int64_t expected,
                         const char* expected_because, const char* declared);

// Product of the dimensions: 0 when any is 0 (whatever the others are), -1
// when one is negative or the product overflows int64.
int64_t element_count(const int64_t* dims, size_t rank);

// The strides (in elements) of a dense row-major tensor of `rank` `dims`, as
// torch makes them (a dimension of 0 counts as 1), into `strides`; false
// where one would pass 2^63 - 1, which only a tensor of no elements can make
// (the strides outside that one are then not written).
bool row_major_strides(const int64_t* dims, size_t rank, int64_t* strides);

// Whether two dimension lists are equal.
bool same_dims(const int64_t* a, size_t a_rank, const int64_t* b, size_t b_rank);

// "rms_norm: output 'out' has shape [2, 3, 8]; its leading dimensions [2, 3]
// (the spec's '...') must equal those of input 'x', [4, 3]"
std::string batch_mismatch(const char* op, const char* role, const char* tensor,
                           const int64_t* dims, size_t rank, size_t lead, const int64_t* batch,
                           size_t batch_rank, const char* batch_source);

// An attribute value in a message: integers exactly, reals in the fewest
// digits that read back to the value (as Python's repr).
std::string number_text(int64_t v);
std::string number_text(double v);
inline std::string number_text(int32_t v) { return number_text(static_cast<int64_t>(v)); }
inline std::string number_text(float v) { return number_text(static_cast<double>(v)); }

// "rms_norm: attribute 'eps' = -1.0 must be >= 0.0" (`range` as the spec
// states it: ">= 0.0", "> 0", "in [1, 8]", "in (0.0, 1.0]")
std::string attr_out_of_range(const char* op, const char* attr, const std::string& value, const char* range);

// "pool: attribute 'window' element 1 = 9 must be in [1, 8]"
std::string attr_element_out_of_range(const char* op, const char* attr, size_t index, const std::string& value,
                                      const char* range);

// "flip: attribute 'dims' lists -1 twice (element 0 and element 1); its elements must differ"
std::string attr_repeated(const char* op, const char* attr, int64_t value, size_t first, size_t again);

// "pool: attribute 'window' has 3 elements; the spec fixes its size at 2"
std::string attr_size_mismatch(const char* op, const char* attr, size_t size, int64_t expected);

// "glu: attribute 'activation' is 'relu'; it must be one of sigmoid, gelu, silu"
std::string enum_unknown(const char* op, const char* attr, const char* value, size_t value_size,
                         const char* values);

// "quant: attribute 'out_dtype' is float16; it must be one of float8_e4m3fn, float8_e5m2"
// (`got` and `allowed` spelled as the caller's framework spells dtypes)
std::string dtype_attr_refused(const char* op, const char* attr, const std::string& got, const std::string& allowed);

// "glu: attribute 'activation' has index 7; it has 3 values (sigmoid, gelu, silu)"
std::string enum_index_out_of_range(const char* op, const char* attr, int64_t index, size_t count,
                                    const char* values);

// "" when `present` (bit i: the i-th optional input is given) names exactly
// `operands` of the op's `optional_count` optional inputs; else the error.
std::string presence_error(const char* op, int64_t present, size_t optional_count, size_t operands);

// The number of optional inputs a presence mask names (its set bits).
size_t present_count(int64_t present);

// "" when `d`, the value of dimension `expression` of `tensor` ("output
// 'out'", "workspace 'partials'"), declared `declared`, is a valid size;
// else why not: "glu: output 'out' is declared [..., D/2], but 7 is not
// divisible by 2", "glu: output 'out' has a dimension D*D*D that overflows
// int64", "glu: output 'out' has a dimension D-5 = -2 < 0".
std::string dim_error(const char* op, const char* tensor, const char* declared, const char* expression,
                      const CheckedDim& d);

// "topk_softmax: output 'w' [N, topk] = [4, 4611686018427387904] would have more than
// 2^63 - 1 elements" (`tensor`: "output 'w'"; `declared`: its shape as the spec
// writes it, which names the symbols and attributes that size it)
std::string too_many_elements(const char* op, const char* tensor, const char* declared, const int64_t* dims,
                              size_t rank);

// "rotary: the spec requires QD % head_size == 0, but QD = 100, head_size = 64"
std::string constraint_failed(const char* op, const char* constraint,
                              std::initializer_list<std::pair<const char*, int64_t>> values);

}  // namespace opgen
