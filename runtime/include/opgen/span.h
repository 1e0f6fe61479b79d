// A read-only view of an array attribute's elements, as the kernel bodies
// see it (Args::<attr>). It points into host memory that outlives the call
// to the body (the XLA attribute, the decoded descriptor or the torch
// tensor): a CUDA body copies what it needs into kernel parameters.
#pragma once

#include <cstddef>

namespace opgen {

template <typename T>
class Span {
 public:
  constexpr Span() = default;
  constexpr Span(const T* data, size_t size) : data_(data), size_(size) {}

  constexpr const T* data() const { return data_; }
  constexpr size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr const T& operator[](size_t i) const { return data_[i]; }
  constexpr const T* begin() const { return data_; }
  constexpr const T* end() const { return data_ + size_; }

 private:
  const T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace opgen
