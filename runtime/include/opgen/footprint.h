// Which bytes a strided tensor occupies, to tell whether two tensors may
// share memory (an input that the op updates in place must share none with
// another input). Exact for what fused LLM layers pass: dense tensors, and
// row views of a wider matrix, such as the query and key views of one qkv
// tensor, whose rows interleave without meeting.
#pragma once

#include <cstddef>
#include <cstdint>

namespace opgen {

// `count` runs of `run` bytes, `stride` bytes apart, from `begin` (a dense
// tensor is one run; a row view one run per row). Where the strides fold
// into no such form, `exact` is false and only [begin, begin + extent) is known.
struct Footprint {
  int64_t begin = 0;
  int64_t run = 0, stride = 0, count = 0;  // count 0: no element
  int64_t extent = 0;
  bool exact = true;
};

// The footprint of a tensor at `data` with `rank` sizes and strides (in
// elements, not negative) of `element_size`-byte elements.
Footprint footprint(const void* data, const int64_t* sizes, const int64_t* strides, size_t rank, size_t element_size);

// False only when the two provably share no byte.
bool may_overlap(const Footprint& a, const Footprint& b);

}  // namespace opgen
