#include "opgen/footprint.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "opgen/shape_check.h"

namespace opgen {

Footprint footprint(const void* data, const int64_t* sizes, const int64_t* strides, size_t rank, size_t element_size) {
  Footprint f;
  f.begin = static_cast<int64_t>(reinterpret_cast<uintptr_t>(data));
  for (size_t i = 0; i < rank; ++i) {
    if (sizes[i] == 0) return f;
  }
  const auto element = static_cast<int64_t>(element_size);
  if (strides == nullptr) {  // dense: one run (the caller's element count fits int64)
    f.run = f.extent = element_count(sizes, rank) * element;
    f.count = 1;
    return f;
  }
  const auto dims = static_cast<int64_t>(rank);
  int64_t last = 0;  // the offset of the last element, in elements
  for (int64_t i = 0; i < dims; ++i) last += (sizes[i] - 1) * strides[i];
  f.extent = (last + 1) * element;
  // The innermost dimensions that are dense make one run; the ones outside
  // them must fold into one stride.
  int64_t k = dims - 1, run = 1;
  for (; k >= 0; --k) {
    if (sizes[k] == 1) continue;
    if (strides[k] != run) break;
    run *= sizes[k];
  }
  f.run = run * element;
  f.count = 1;
  for (int64_t inner = -1; k >= 0; --k) {
    if (sizes[k] == 1) continue;
    if (inner < 0) f.stride = strides[k] * element;
    else if (strides[k] != strides[inner] * sizes[inner]) f.exact = false;
    f.count *= sizes[k];
    inner = k;
  }
  if (f.count > 1 && f.stride < f.run) f.exact = false;  // broadcast (stride 0) or runs that overlap
  return f;
}

bool may_overlap(const Footprint& a, const Footprint& b) {
  if (a.count == 0 || b.count == 0) return false;
  if (a.begin >= b.begin + b.extent || b.begin >= a.begin + a.extent) return false;
  if (!a.exact || !b.exact) return true;
  if (a.count == 1 && b.count == 1) return true;  // two runs whose extents meet
  if (a.count > 1 && b.count > 1 && a.stride != b.stride) return true;  // not worth proving apart
  const int64_t s = a.count > 1 ? a.stride : b.stride;
  if (a.run > s || b.run > s) return true;  // a run that spans rows of the other: not worth proving apart
  // Run i of a, [a.begin + i s, + a.run), meets run j of b when b's start
  // minus a's, delta + (j - i) s, lies in (-b.run, a.run): k = j - i is at
  // most floor((a.run - 1 - delta) / s), and the window (-b.run, a.run) is
  // at most 2 s - 1 long, so that k or the one below it is the only candidate.
  const int64_t delta = b.begin - a.begin;
  const int64_t top = a.run - 1 - delta;
  const int64_t k0 = top >= 0 ? top / s : -((-top + s - 1) / s);
  for (int64_t k : {k0, k0 - 1}) {
    if (k < -(a.count - 1) || k > b.count - 1) continue;
    const int64_t start = delta + k * s;
    if (start > -b.run && start < a.run) return true;
  }
  return false;
}

bool self_overlaps(const int64_t* sizes, const int64_t* strides, size_t rank) {
  if (strides == nullptr) return false;  // dense
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of each dimension of more than one element
  for (size_t i = 0; i < rank; ++i) {
    if (sizes[i] == 0) return false;
    if (sizes[i] > 1) dims.emplace_back(strides[i], sizes[i]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // the largest offset the dimensions inside this one address
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return true;
    int64_t span = 0;
    if (__builtin_mul_overflow(stride, size - 1, &span) || __builtin_add_overflow(reach, span, &reach)) return true;
  }
  return false;
}

Status in_place_conflict(const char* op, const char* const* names, const TensorExtent* inputs, size_t count,
                         size_t updated) {
  if (inputs[updated].data == nullptr) return Status::Ok();
  const TensorExtent& a = inputs[updated];
  const std::string name = names[updated];
  if (self_overlaps(a.sizes, a.strides, a.rank)) {
    return Status::InvalidArgument(std::string(op) + ": input '" + name + "' is updated in place, but its elements "
                                   "overlap in memory (sizes " + shape_text(a.sizes, a.rank) + ", strides " +
                                   shape_text(a.strides, a.rank) + ": an expanded or overlapping view), so the "
                                   "update would write one place twice; pass a tensor whose elements are its own "
                                   "(e.g. " + name + ".clone())");
  }
  const Footprint mine = footprint(a.data, a.sizes, a.strides, a.rank, a.element_size);
  for (size_t k = 0; k < count; ++k) {
    if (k == updated || inputs[k].data == nullptr) continue;
    const TensorExtent& b = inputs[k];
    if (!may_overlap(mine, footprint(b.data, b.sizes, b.strides, b.rank, b.element_size))) continue;
    return Status::InvalidArgument(std::string(op) + ": input '" + names[k] + "' shares memory with input '" + name +
                                   "', which the op updates in place; pass a tensor of its own (e.g. " + names[k] +
                                   ".clone())");
  }
  return Status::Ok();
}

}  // namespace opgen
