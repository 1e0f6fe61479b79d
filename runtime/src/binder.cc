#include "opgen/binder.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "opgen/footprint.h"
#include "opgen/shape_check.h"

namespace opgen {

bool Source::symbol(size_t, int64_t*) { return false; }
bool Source::batch(int64_t*) { return false; }
bool Source::type_var(size_t, DType*) { return false; }

bool Source::requested(size_t) { return false; }

void Source::unrequested(size_t, const char*, DType) {}

Device Source::device() const { return Device::kCpu; }

bool Source::allocates() const { return false; }
uint64_t Source::memory() const { return 0; }
std::string Source::device_name() const { return device() == Device::kCuda ? "cuda" : "cpu"; }

void Source::workspace_shape(size_t, const char*, DType, const int64_t*, size_t) {}

Dialect Source::dialect() const { return Dialect::kSpec; }

std::string Binder::spell(DType d) const {
  return source_.dialect() == Dialect::kSpec ? dtype_name(d) : numpy_name(d);
}

std::string Binder::given_dtype(const TensorRef& t) const { return t.foreign ? t.foreign : spell(t.dtype); }

std::string Binder::dtype_hint(DType declared) const {
  switch (source_.dialect()) {
    case Dialect::kSpec: break;
    case Dialect::kJax: return std::string(" (convert it explicitly, e.g. x.astype(jnp.") + numpy_name(declared) + "))";
    case Dialect::kTorch: return std::string(" (convert it explicitly, e.g. x.to(torch.") + numpy_name(declared) + "))";
  }
  return {};
}

void Binder::fail(Status s) {
  if (status_.ok() && !s.ok()) status_ = std::move(s);
}

void Binder::fail_dtype(std::string message) { fail(Status::WrongType(std::move(message))); }

void Binder::check(const std::string& error) {
  if (!error.empty()) fail(Status::InvalidArgument(error));
}

std::string Binder::who(const char* role, const char* name) const {
  return std::string(op_) + ": " + role + " '" + name + "'";
}

std::string Binder::binding_rule(const char* symbol, size_t index) const {
  if (!bound(index)) return std::string(symbol);
  const Origin& o = origins_[index];
  return std::string(symbol) + ", bound by input '" + o.input + "' dimension " + std::to_string(o.axis) +
         (o.after_batch ? " after its '...'" : "");
}

// --- dtypes -----------------------------------------------------------------

namespace {
// Whether the call says what dtype `t` has (a legacy call's buffers do not).
bool has_dtype(const TensorRef& t) { return t.dtype != DType::kUnknown || t.foreign != nullptr; }
}  // namespace

void Binder::dtype(size_t i, const char* name, DType declared) {
  if (!ok()) return;
  const TensorRef* t = source_.input(i);
  if (t == nullptr || !has_dtype(*t) || t->dtype == declared) return;
  fail_dtype(who("input", name) + " has dtype " + given_dtype(*t) + "; the spec declares " +
             spell(declared) + dtype_hint(declared));
}

void Binder::chosen_dtype(size_t i, const char* name, DType chosen, const char* attr) {
  if (!ok()) return;
  const TensorRef* t = source_.input(i);
  if (t == nullptr || !has_dtype(*t) || t->dtype == chosen) return;
  fail_dtype(who("input", name) + " has dtype " + given_dtype(*t) + "; attribute '" + attr + "' chooses " +
             spell(chosen) + " for it");
}

DType Binder::type_var(size_t var, const char* var_name, size_t i, const char* name,
                       std::initializer_list<DType> allowed, int* index) {
  *index = -1;
  if (!ok()) return DType::kUnknown;
  DType d = DType::kUnknown;
  const bool from_descriptor = source_.type_var(var, &d);
  const TensorRef* t = from_descriptor ? nullptr : source_.input(i);
  if (t != nullptr) d = t->dtype;
  int k = 0;
  for (DType a : allowed) {
    if (a == d && d != DType::kUnknown) {
      *index = k;
      bind_type(var_name, d);
      return d;
    }
    ++k;
  }
  if (from_descriptor || t == nullptr) {
    fail(Status::InvalidArgument(std::string(op_) + ": the opaque descriptor names dtypes this op was not built for"));
    return DType::kUnknown;
  }
  std::string names;
  for (DType a : allowed) names += (names.empty() ? "" : ", ") + spell(a);
  fail_dtype(who("input", name) + " has dtype " + given_dtype(*t) + "; " + var_name + " must be one of " +
             names);
  return DType::kUnknown;
}

DType Binder::dtype_attr(size_t i, const char* name, std::initializer_list<DType> allowed, int* index) {
  *index = -1;
  if (!ok()) return DType::kUnknown;
  AttrValue v;
  if (Status s = source_.attr(i, name, AttrKind::kDtype, &v); !s.ok()) {
    fail(s);
    return DType::kUnknown;
  }
  std::string names;
  int k = 0;
  for (DType a : allowed) {
    if (static_cast<int64_t>(a) == v.i) {
      *index = k;
      return a;
    }
    names += (names.empty() ? "" : ", ") + spell(a);
    ++k;
  }
  const bool known = v.i >= 0 && v.i < kDTypeCount;
  const std::string got = known ? spell(static_cast<DType>(v.i))
                          : v.name.empty() ? std::string("an unsupported dtype") : std::string(v.name);
  fail(Status::InvalidArgument(dtype_attr_refused(op_, name, got, names)));
  return DType::kUnknown;
}

void Binder::same_dtype(size_t i, const char* name, const char* var_name, const char* bound_by, DType bound) {
  if (!ok()) return;
  const TensorRef* t = source_.input(i);
  if (t == nullptr || !has_dtype(*t) || t->dtype == bound) return;
  fail_dtype(who("input", name) + " has dtype " + given_dtype(*t) + ", but its dtype " + var_name + " is " +
             spell(bound) + " (bound by input '" + bound_by + "')");
}

// --- inputs -----------------------------------------------------------------

Binder::Input::Input(Binder* b, const char* name, const char* declared, size_t rank, bool has_batch, bool updated,
                     const TensorRef* t)
    : b_(b), name_(name), declared_(declared), rank_(rank), has_batch_(has_batch), updated_(updated), t_(t) {
  std::fill_n(sizes_, std::min(rank, kMaxRank), 0);
  if (!live() || t_->dims == nullptr) return;
  if (rank == 0 && !has_batch) {
    // A scalar input: [] or [1] (vLLM passes its scales as [1]). The body
    // reads its one element through the pointer either way; lead_ = 1 skips
    // the [1]'s dimension as a batch's would be (no strides, no sizes).
    if (t_->rank > 1 || (t_->rank == 1 && t_->dims[0] != 1)) {
      b_->fail(Status::InvalidArgument(scalar_mismatch(b_->op_, "input", name, t_->dims, t_->rank)));
      return;
    }
  } else if (has_batch ? t_->rank < rank : t_->rank != rank) {
    b_->fail(Status::InvalidArgument(rank_mismatch(b_->op_, "input", name, t_->dims, t_->rank, declared)));
    return;
  }
  if (t_->rank > kMaxRank) {
    b_->fail(Status::InvalidArgument(b_->who("input", name) + " has rank " + std::to_string(t_->rank) +
                                     "; opgen binds at most " + std::to_string(kMaxRank) + " dimensions"));
    return;
  }
  lead_ = t_->rank - rank;
}

Binder::Input& Binder::Input::batch(int64_t* count) {
  if (!live()) return *this;
  Binder& b = *b_;
  if (t_->dims == nullptr) {  // the descriptor gives the count
    int64_t v = 0;
    if (b.source_.batch(&v) && v < 0) {
      b.fail(Status::InvalidArgument(std::string(b.op_) + ": opaque descriptor gives batch = " + std::to_string(v)));
      return *this;
    }
    b.batch_count_ = v;
    b.batch_known_ = true;
    if (count) *count = v;
    return *this;
  }
  if (b.batch_source_ == nullptr) {
    b.batch_source_ = name_;
    b.batch_dims_ = t_->dims;
    b.batch_rank_ = lead_;
    // 0 when a leading dimension is 0, whatever the others (no overflow).
    b.batch_count_ = element_count(t_->dims, lead_);
    b.batch_known_ = true;
    if (count) *count = b.batch_count_;
  } else if (!same_dims(t_->dims, lead_, b.batch_dims_, b.batch_rank_)) {
    b.fail(Status::InvalidArgument(batch_mismatch(b.op_, "input", name_, t_->dims, t_->rank, lead_, b.batch_dims_,
                                                  b.batch_rank_, b.batch_source_)));
  }
  return *this;
}

Binder::Input& Binder::Input::batch() { return batch(nullptr); }

Binder::Input& Binder::Input::bind(size_t axis, size_t index, const char* symbol, int64_t* value) {
  if (!live()) return *this;
  Binder& b = *b_;
  if (t_->dims == nullptr) {
    int64_t v = 0;
    b.source_.symbol(index, &v);
    if (v < 0) {
      b.fail(Status::InvalidArgument(std::string(b.op_) + ": opaque descriptor gives shape symbol " + symbol + " = " +
                                     std::to_string(v)));
      return *this;
    }
    *value = v;
    sizes_[axis] = v;
    return *this;
  }
  *value = t_->dims[lead_ + axis];
  sizes_[axis] = *value;
  if (index < kMaxSymbols) {
    b.origins_[index] = {name_, axis, has_batch_, symbol, *value};
    b.bound_ |= uint64_t{1} << index;
  }
  return *this;
}

void Binder::Input::expect(size_t axis, int64_t expected, const char* symbol, size_t index) {
  if (axis < kMaxRank) sizes_[axis] = expected;
  if (!live() || t_->dims == nullptr || t_->dims[lead_ + axis] == expected) return;
  const std::string because = symbol ? b_->binding_rule(symbol, index) : std::string("a fixed size");
  b_->fail(Status::InvalidArgument(dim_mismatch(b_->op_, "input", name_, t_->dims, t_->rank, lead_ + axis, expected,
                                                because.c_str(), declared_)));
}

Binder::Input& Binder::Input::dim(size_t axis, size_t index, const char* symbol, int64_t expected) {
  expect(axis, expected, symbol, index);
  return *this;
}

Binder::Input& Binder::Input::fixed(size_t axis, int64_t size) {
  expect(axis, size, nullptr, 0);
  return *this;
}

Binder::Input& Binder::Input::layout(Layout layout, int64_t* strides) {
  if (!live()) return *this;
  Binder& b = *b_;
  const size_t out_strides = rank_ + (has_batch_ ? 1 : 0);
  if (t_->dims == nullptr) {
    // A legacy call's buffers are dense: strides from the sizes the
    // descriptor gave (the batch stride first); the output checks bound
    // their product.
    if (strides == nullptr) return *this;
    uint64_t n = 1;
    for (size_t k = rank_; k-- > 0;) {
      strides[k + (has_batch_ ? 1 : 0)] = static_cast<int64_t>(n);
      n *= static_cast<uint64_t>(sizes_[k]);
    }
    if (has_batch_) strides[0] = static_cast<int64_t>(n);
    return *this;
  }
  const size_t rank = t_->rank;
  for (size_t k = 0; k < rank; ++k) {
    if (t_->dims[k] == 0) {  // an empty tensor: no element to address, any strides
      if (strides) {
        for (size_t j = 0; j < out_strides; ++j) strides[j] = 0;
      }
      return *this;
    }
  }
  // Dense row-major strides, where the call gives none (XLA's buffers); not
  // empty, the tensor's element count fits int64, and so does each stride.
  int64_t dense[kMaxRank];
  if (!t_->strides) (void)row_major_strides(t_->dims, rank, dense);
  const int64_t* st = t_->strides ? t_->strides : dense;
  if (layout == Layout::kContiguous) {
    int64_t expected = 1;
    for (size_t k = rank; k-- > 0;) {
      if (t_->dims[k] != 1 && st[k] != expected) {
        b.fail(Status::InvalidArgument(
            b.who("input", name_) +
            (updated_ ? " is updated in place, and the spec's layout for it is contiguous: it must be dense "
                        "row-major as it is (a .contiguous() copy would take the update and drop it); pass a dense "
                        "tensor, or declare `layout: strided` for it"
                      : " is not contiguous; the kernel reads dense row-major memory (call .contiguous(), or "
                        "declare `layout: strided` for it in the spec)")));
        return *this;
      }
      expected *= t_->dims[k];
    }
    return *this;
  }
  if (layout == Layout::kRows && rank_ > 0 && t_->dims[rank - 1] > 1 && st[rank - 1] != 1) {
    b.fail(Status::InvalidArgument(b.who("input", name_) + " has stride " + std::to_string(st[rank - 1]) +
                                   " in its last dimension; its spec layout `rows` needs that dimension contiguous"));
    return *this;
  }
  size_t out = 0;
  if (has_batch_) {
    // The leading dimensions must fold into one stride: that of the innermost
    // one of more than one element.
    int64_t batch_stride = 0;
    size_t inner = lead_;
    for (size_t k = lead_; k-- > 0;) {
      if (t_->dims[k] == 1) continue;
      int64_t folded = 0;
      if (inner == lead_) {
        batch_stride = st[k];
      } else if (__builtin_mul_overflow(st[inner], t_->dims[inner], &folded) || st[k] != folded) {
        b.fail(Status::InvalidArgument(b.who("input", name_) + " has leading dimensions " +
                                       shape_text(t_->dims, lead_) + " with strides " + shape_text(st, lead_) +
                                       ", which do not fold into one batch stride"));
        return *this;
      }
      inner = k;
    }
    strides[out++] = batch_stride;
  }
  for (size_t k = lead_; k < rank; ++k) strides[out++] = st[k];
  return *this;
}

// --- attributes ---------------------------------------------------------------

bool Binder::read_attr(size_t i, const char* name, AttrKind kind, AttrValue* value) {
  if (!ok()) return false;
  fail(source_.attr(i, name, kind, value));
  return ok();
}

void Binder::attr(size_t i, const char* name, bool* value) {
  AttrValue v;
  if (read_attr(i, name, AttrKind::kBool, &v)) *value = v.b;
}

void Binder::attr(size_t i, const char* name, int32_t* value) {
  AttrValue v;
  if (!read_attr(i, name, AttrKind::kI32, &v)) return;
  if (v.i < std::numeric_limits<int32_t>::min() || v.i > std::numeric_limits<int32_t>::max()) {
    fail(Status::InvalidArgument(who("attribute", name) + " = " + std::to_string(v.i) + " does not fit i32"));
    return;
  }
  *value = static_cast<int32_t>(v.i);
}

void Binder::attr(size_t i, const char* name, int64_t* value) {
  AttrValue v;
  if (read_attr(i, name, AttrKind::kI64, &v)) *value = v.i;
}

void Binder::attr(size_t i, const char* name, float* value) {
  AttrValue v;
  if (!read_attr(i, name, AttrKind::kF32, &v)) return;
  if (!std::isfinite(v.f)) {
    fail(Status::InvalidArgument(who("attribute", name) + " = " + number_text(v.f) + " is not finite"));
    return;
  }
  if (std::fabs(v.f) > static_cast<double>(std::numeric_limits<float>::max())) {
    fail(Status::InvalidArgument(who("attribute", name) + " = " + number_text(v.f) + " does not fit f32"));
    return;
  }
  *value = static_cast<float>(v.f);
}

void Binder::attr(size_t i, const char* name, double* value) {
  AttrValue v;
  if (!read_attr(i, name, AttrKind::kF64, &v)) return;
  if (!std::isfinite(v.f)) {
    fail(Status::InvalidArgument(who("attribute", name) + " = " + number_text(v.f) + " is not finite"));
    return;
  }
  *value = v.f;
}

void Binder::attr(size_t i, const char* name, Span<const int32_t>* value) {
  AttrValue v;
  if (read_attr(i, name, AttrKind::kI32Array, &v)) *value = v.i32s;
}

void Binder::attr(size_t i, const char* name, Span<const int64_t>* value) {
  AttrValue v;
  if (read_attr(i, name, AttrKind::kI64Array, &v)) *value = v.i64s;
}

void Binder::enum_index(size_t i, const char* name, std::initializer_list<const char*> values, const char* listed,
                        int32_t* index) {
  AttrValue v;
  if (!read_attr(i, name, AttrKind::kEnum, &v)) return;
  if (v.by_name) {
    int32_t k = 0;
    for (const char* value : values) {
      if (v.name == value) {
        *index = k;
        return;
      }
      ++k;
    }
    fail(Status::InvalidArgument(enum_unknown(op_, name, v.name.data(), v.name.size(), listed)));
    return;
  }
  if (v.i < 0 || v.i >= static_cast<int64_t>(values.size())) {
    fail(Status::InvalidArgument(enum_index_out_of_range(op_, name, v.i, values.size(), listed)));
    return;
  }
  *index = static_cast<int32_t>(v.i);
}

// --- outputs and scratch ------------------------------------------------------

size_t result_count(const int* aliases, const int* requests, size_t outputs, size_t required_inputs, uint64_t present,
                    uint64_t requested) {
  size_t n = outputs;
  for (size_t i = 0; i < outputs; ++i) {
    const int a = aliases[i];
    if (a >= static_cast<int>(required_inputs) && !(present & (uint64_t{1} << (a - static_cast<int>(required_inputs))))) {
      --n;
    } else if (requests[i] >= 0 && !(requested & (uint64_t{1} << requests[i]))) {
      --n;
    }
  }
  return n;
}

std::string request_error(const char* op, int64_t requested, size_t requestable) {
  if (requested < 0 || (requestable < 63 && (requested >> requestable) != 0)) {
    return std::string(op) + ": the request mask " + std::to_string(requested) + " names outputs beyond the op's " +
           std::to_string(requestable) + " optional one(s)";
  }
  return {};
}

namespace {
// `count` (>= 0: both callers refuse a negative one first) elements of
// `dtype` fit in 2^63 - 1 bytes (`*bytes`).
bool fits_bytes(int64_t count, DType dtype, size_t* bytes) {
  int64_t b = 0;
  if (__builtin_mul_overflow(count, static_cast<int64_t>(dtype_size(dtype)), &b)) return false;
  *bytes = static_cast<size_t>(b);
  return true;
}
// `v` in decimal (past 2^64 too).
std::string decimal(unsigned __int128 v) {
  std::string digits;
  for (; v > 0; v /= 10) digits.insert(digits.begin(), static_cast<char>('0' + v % 10));
  return digits.empty() ? "0" : digits;
}
// The bytes of `count` elements of `dtype`, in decimal.
std::string bytes_text(int64_t count, DType dtype) {
  return decimal(static_cast<unsigned __int128>(count) * dtype_size(dtype));
}
}  // namespace

const TensorRef* Binder::given(size_t i, const char* name, unsigned flags) {
  if (i < kMaxInputs) {
    input_names_[i] = name;
    if (i + 1 > input_count_) input_count_ = i + 1;
  }
  if (!ok()) return nullptr;
  const TensorRef* t = source_.input(i);
  if (t == nullptr && !(flags & kOptional)) fail(Status::InvalidArgument(who("input", name) + " is required"));
  return t;
}

void Binder::output_buffer(size_t i, const char* name, const char* declared, DType dtype, bool batch,
                           std::initializer_list<int64_t> dims, int alias, void* slot,
                           void (*assign)(void* slot, void* data)) {
  if (!ok()) return;
  if (i >= kMaxOutputs) {
    fail(Status::Internal(std::string(op_) + ": more than " + std::to_string(kMaxOutputs) + " outputs"));
    return;
  }
  int64_t shape[kMaxRank + kMaxRank];
  size_t rank = shape_of(batch, dims, shape);
  // An output that updates a scalar input given as [1] is that [1].
  if (alias >= 0 && !batch && dims.size() == 0) {
    const TensorRef* in = source_.input(static_cast<size_t>(alias));
    if (in != nullptr && in->dims != nullptr && in->rank == 1) shape[rank++] = 1;
  }
  // The rules have bounded the element count by int64; the bytes are bounded
  // here, once for every framework: XLA sizes a buffer in bytes as an int64
  // (and aborts the process past it), and so does torch's allocator.
  const int64_t count = element_count(shape, rank);
  size_t bytes = 0;
  if (count < 0) {
    fail(Status::InvalidArgument(who("output", name) + " " + declared + " of shape " + shape_text(shape, rank) +
                                 " has no element count (a negative dimension, or more than 2^63 - 1 "
                                 "elements)"));
    return;
  }
  if (!fits_bytes(count, dtype, &bytes)) {
    fail(Status::InvalidArgument(who("output", name) + " " + declared + " of shape " + shape_text(shape, rank) +
                                 " and dtype " + spell(dtype) + " would take " +
                                 bytes_text(count, dtype) + " bytes, more than 2^63 - 1"));
    return;
  }
  data_[i] = nullptr;
  bytes_[i] = bytes;
  if (i + 1 > outputs_) outputs_ = i + 1;
  empty_ = empty_ && count == 0;
  if (alias < 0 && source_.allocates()) {
    // Allocated by allocate(), once every rule has passed.
    if (pending_dims_used_ + rank > kMaxPendingDims) {
      fail(Status::Internal(who("output", name) + ": the outputs have more than " + std::to_string(kMaxPendingDims) +
                            " dimensions in all; the binder holds no more until it allocates them"));
      return;
    }
    std::copy_n(shape, rank, pending_dims_ + pending_dims_used_);
    pending_[pending_count_++] = {i, i - omitted_, name, declared, dtype, true, pending_dims_used_, rank, slot, assign};
    pending_dims_used_ += rank;
    return;
  }
  void* data = nullptr;
  if (alias >= 0 && source_.allocates()) {
    fail(in_place(name, static_cast<size_t>(alias), &data));
  } else {
    fail(source_.output(i - omitted_, name, declared, dtype, shape, rank, &data));
  }
  if (!ok()) return;
  data_[i] = data;
  assign(slot, data);
}

Status Binder::in_place(const char* name, size_t alias, void** data) {
  const TensorRef* updated = source_.input(alias);
  if (updated == nullptr || alias >= input_count_) {
    return Status::Internal(who("output", name) + " updates no input");
  }
  // Every input's dtype is opgen's by now (the rules have checked it), so
  // its element size is known.
  TensorExtent extents[kMaxInputs];
  for (size_t k = 0; k < input_count_; ++k) {
    const TensorRef* t = source_.input(k);
    if (t == nullptr) continue;
    extents[k] = {t->data, t->dims, t->strides, t->rank, dtype_size(t->dtype)};
  }
  if (Status s = in_place_conflict(op_, input_names_, extents, input_count_, alias); !s.ok()) return s;
  *data = updated->data;
  return Status::Ok();
}

void Binder::unrequested(size_t i, const char* name, const char* declared, DType dtype) {
  if (!source_.allocates()) {
    source_.unrequested(i, name, dtype);
    return;
  }
  if (i >= kMaxOutputs) {
    fail(Status::Internal(std::string(op_) + ": more than " + std::to_string(kMaxOutputs) + " outputs"));
    return;
  }
  pending_[pending_count_++] = {i, i, name, declared, dtype, false, 0, 0, nullptr, nullptr};
}

size_t Binder::shape_of(bool batch, std::initializer_list<int64_t> dims, int64_t* shape) const {
  size_t rank = 0;
  if (batch) {
    if (batch_dims_ != nullptr) {
      for (size_t k = 0; k < batch_rank_; ++k) shape[rank++] = batch_dims_[k];
    } else {
      shape[rank++] = batch_count_;  // a legacy call: the flattened count
    }
  }
  for (int64_t d : dims) shape[rank++] = d;
  return rank;
}

void Binder::request_scratch(size_t i, const char* name, DType dtype, bool batch, std::initializer_list<int64_t> dims,
                             unsigned devices, void* slot, void (*assign)(void* slot, void* data)) {
  if (!ok()) return;
  int64_t shape[kMaxRank + kMaxRank];
  const size_t rank = shape_of(batch, dims, shape);
  source_.workspace_shape(i, name, dtype, shape, rank);
  if (!(devices & device_bit(source_.device()))) return;
  // The rules' workspace_dims have bounded the element count by int64 (a
  // workspace of one dimension excepted, whose value is its count).
  int64_t count = 1;
  for (size_t k = 0; k < rank; ++k) {
    if (__builtin_mul_overflow(count, shape[k], &count)) {
      fail(Status::InvalidArgument(who("workspace", name) + " would have more than 2^63 - 1 elements"));
      return;
    }
  }
  size_t bytes = 0;
  if (count < 0) {
    fail(Status::InvalidArgument(who("workspace", name) + " would have " + std::to_string(count) + " elements"));
    return;
  }
  if (!fits_bytes(count, dtype, &bytes)) {
    fail(Status::InvalidArgument(who("workspace", name) + " of " + std::to_string(count) + " elements would take " +
                                 bytes_text(count, dtype) + " bytes, more than 2^63 - 1"));
    return;
  }
  // In spec order; those not allocated on this platform are skipped, so the
  // call's workspaces are numbered apart from the spec's.
  if (i < scratch_count_ || scratch_count_ >= kMaxOutputs) {
    fail(Status::Internal(who("workspace", name) + " was requested out of order"));
    return;
  }
  const size_t k = scratch_count_++;
  scratch_names_[k] = name;
  scratch_bytes_[k] = bytes;
  scratch_slots_[k] = slot;
  scratch_assign_[k] = assign;
}

void Binder::check_memory() {
  const uint64_t memory = source_.memory();
  if (memory == 0) return;
  // At most 64 outputs and 64 workspaces of less than 2^63 bytes each: an
  // unsigned __int128 holds their sum.
  unsigned __int128 total = 0;
  auto refuse = [&](const std::string& what, unsigned __int128 bytes) {
    std::string text = what + " would take " + decimal(bytes) + " bytes";
    if (total != bytes) {
      text += ", which with the call's other new outputs and workspaces makes " + decimal(total) + " bytes";
    }
    fail(Status::InvalidArgument(text + ", more than the " + std::to_string(memory) + " bytes of memory " +
                                 source_.device_name() + " has"));
  };
  for (size_t k = 0; k < pending_count_; ++k) {
    const Pending& p = pending_[k];
    if (!p.requested) continue;
    total += bytes_[p.index];
    if (total > memory) {
      return refuse(who("output", p.name) + " " + p.declared + " of shape " +
                        shape_text(pending_dims_ + p.dims_at, p.rank) + " and dtype " + spell(p.dtype),
                    bytes_[p.index]);
    }
  }
  unsigned __int128 scratch = 0;
  for (size_t k = 0; k < scratch_count_; ++k) scratch += scratch_bytes_[k];
  total += scratch;
  if (total > memory) {
    std::string names;
    for (size_t k = 0; k < scratch_count_; ++k) names += (k ? ", " : "") + std::string(scratch_names_[k]);
    refuse(std::string(op_) + ": " + (scratch_count_ == 1 ? "workspace" : "workspaces") + " '" + names + "'",
           scratch);
  }
}

void Binder::allocate() {
  if (!ok()) return;
  if ((pending_count_ > 0 || scratch_count_ > 0) && source_.allocates()) {
    check_memory();
    if (!ok()) return;
  }
  for (size_t k = 0; k < pending_count_; ++k) {
    const Pending& p = pending_[k];
    void* data = nullptr;
    if (!p.requested) {
      // The framework's results are fixed: a placeholder of no elements; the body sees nullptr.
      static constexpr int64_t kNone[1] = {0};
      fail(source_.output(p.result, p.name, p.declared, p.dtype, kNone, 1, &data));
      if (!ok()) return;
      continue;
    }
    fail(source_.output(p.result, p.name, p.declared, p.dtype, pending_dims_ + p.dims_at, p.rank, &data));
    if (!ok()) return;
    data_[p.index] = data;
    p.assign(p.slot, data);
  }
  if (scratch_count_ == 0) return;
  void* data[kMaxOutputs] = {};
  if (!source_.allocates() || scratch_count_ == 1) {
    // Each its own buffer (one that allocates makes one of the exact size).
    for (size_t i = 0; i < scratch_count_; ++i) {
      fail(source_.workspace(i, &scratch_names_[i], 1, scratch_bytes_[i], &data[i]));
      if (!ok()) return;
    }
  } else {
    // One buffer for them all, each on 256 bytes, as torch's allocator aligns a tensor.
    constexpr size_t kAlign = 256;
    size_t offsets[kMaxOutputs];
    size_t total = 0;
    for (size_t i = 0; i < scratch_count_; ++i) {
      offsets[i] = total;
      if (__builtin_add_overflow(total, (scratch_bytes_[i] + kAlign - 1) / kAlign * kAlign, &total) ||
          total > static_cast<size_t>(std::numeric_limits<int64_t>::max())) {
        return fail(Status::InvalidArgument(std::string(op_) + ": the workspaces would take more than 2^63 - 1 bytes"));
      }
    }
    void* base = nullptr;
    fail(source_.workspace(0, scratch_names_, scratch_count_, total, &base));
    if (!ok()) return;
    for (size_t i = 0; i < scratch_count_; ++i) {
      data[i] = scratch_bytes_[i] == 0 ? nullptr : static_cast<char*>(base) + offsets[i];
    }
  }
  for (size_t i = 0; i < scratch_count_; ++i) scratch_assign_[i](scratch_slots_[i], data[i]);
}

}  // namespace opgen
