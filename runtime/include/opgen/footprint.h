// Which bytes a strided tensor occupies, to tell whether an input that the op
// updates in place is safe to write: its own elements must not overlap one
// another (an expanded, stride-0 tensor; rows closer together than their
// length), and it must share no memory with another input (the body would
// read what it overwrites). Exact for what fused LLM layers pass: dense
// tensors, and row views of a wider matrix, such as the query and key views
// of one qkv tensor, whose rows interleave without meeting.
#pragma once

#include <cstddef>
#include <cstdint>

#include "opgen/status.h"

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
// elements, not negative; null: dense row-major, the element count fitting
// int64) of `element_size`-byte elements.
Footprint footprint(const void* data, const int64_t* sizes, const int64_t* strides, size_t rank, size_t element_size);

// False only when the two provably share no byte.
bool may_overlap(const Footprint& a, const Footprint& b);

// False only when every element of the tensor has a place of its own: its
// dimensions, by increasing stride, each step past all the elements of the
// dimensions inside them. (A layout that interleaves its dimensions without
// meeting, which no framework makes by slicing, counts as overlapping.)
// Null `strides`: dense row-major, which never overlaps.
bool self_overlaps(const int64_t* sizes, const int64_t* strides, size_t rank);

// A tensor argument as the in-place check sees it; `data` null: not given;
// `strides` null: dense and row-major (DLPack's compact form).
struct TensorExtent {
  const void* data = nullptr;
  const int64_t* sizes = nullptr;
  const int64_t* strides = nullptr;
  size_t rank = 0;
  size_t element_size = 0;
};

// The one rule for an input that `op` updates in place, `inputs[updated]`:
// its elements do not overlap, and it shares no memory with another given
// input. Every binding that hands the body caller-owned memory (the torch
// kernels, and the Python paths that copy the update back) asks it.
Status in_place_conflict(const char* op, const char* const* names, const TensorExtent* inputs, size_t count,
                         size_t updated);

}  // namespace opgen
