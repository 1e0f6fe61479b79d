// Binding a call of an op to its kernel's Args, once for every framework.
//
// Each op's rules are one generated routine (`<op>_rules.h`), which reads like
// the spec it comes from:
//
//   b.input(0, "x", "[..., D]", 1, true, &args.x)
//       .batch(&args.batch)
//       .bind(0, 0, "D", &args.D)
//       .layout(opgen::Layout::kContiguous);
//   b.input(1, "weight", "[D]", 1, false, &args.weight, opgen::Binder::kOptional)
//       .dim(0, 0, "D", args.D)
//       .layout(opgen::Layout::kContiguous);
//   b.check(checks::output_dims(args));
//   if (!b.ok()) return;
//   b.output(0, "out", "[..., D]", true, {args.D}, &args.out);
//   b.attr(0, "eps", &args.eps);
//   b.check(checks::attrs(args));
//
// (rms_norm's, abridged; an attribute that an output's shape names, topk in
// [N, topk], is read and its range checked before output_dims, so that the
// outputs are sized from a checked value; a framework that allocates the
// outputs, PyTorch, is asked for them only after the whole routine, by
// Binder::allocate, so that a refused call allocates nothing) and a Binder
// runs it over a Source:
// what one framework gives the call (the typed XLA FFI, a legacy custom call,
// a PyTorch boxed kernel, an eager torch call around the dispatcher, a Python entry
// point's shapes at trace time; see xla_ffi_binding.h, xla_legacy_binding.h,
// torch_stable.h, torch_eager.h, shape_source.h). So every entry
// point checks the same rules in the same order with the same messages, by
// construction. The first failure is kept and every later step does nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "opgen/dtypes.h"
#include "opgen/span.h"
#include "opgen/status.h"

namespace opgen {

// A tensor of a call as any framework can describe it.
struct TensorRef {
  DType dtype = DType::kUnknown;     // kUnknown also where the framework does not say (a legacy call)
  const char* foreign = nullptr;     // the framework's name of a dtype opgen does not know (then kUnknown)
  size_t rank = 0;
  const int64_t* dims = nullptr;     // nullptr: no shapes given (a legacy call's descriptor is trusted)
  const int64_t* strides = nullptr;  // in elements; nullptr: dense row-major
  void* data = nullptr;
};

// `dims` as a TensorRef of a framework that gives shapes holds them: never
// nullptr, which says that no shapes are given, so that a 0-d tensor (whose
// empty shape may have no storage: an empty std::vector's, DLPack's) is
// checked against the spec's rank like any other.
inline const int64_t* given_dims(const int64_t* dims) {
  static constexpr int64_t kNoDimension[1] = {0};
  return dims != nullptr ? dims : kNoDimension;
}

// kDtype: a dtype attribute, as its opgen::DType code in `i` (every source
// converts its framework's dtype to the code; -1 for one opgen lacks, then
// `name` may hold the framework's name of it).
enum class AttrKind : uint8_t { kBool, kI32, kI64, kF32, kF64, kEnum, kI32Array, kI64Array, kDtype };

// An attribute's value as a framework hands it over.
struct AttrValue {
  bool b = false;
  int64_t i = 0;             // an integer, or an enum's index (unless by_name)
  double f = 0;
  std::string_view name;     // an enum by name (the typed FFI)
  bool by_name = false;
  Span<const int32_t> i32s;  // i32[]
  Span<const int64_t> i64s;  // i64[]
};

// How a tensor's memory may be laid out (the spec's `layout`).
enum class Layout : uint8_t {
  kContiguous,  // dense row-major (the default)
  kRows,        // the last dimension contiguous, any stride for the others
  kStrided,     // any strides
};

// Where a call runs: a workspace may be allocated on some platforms only
// (the spec's `platforms:` of a workspace), as a bit of a mask.
enum class Device : uint8_t { kCpu, kCuda };
inline constexpr unsigned device_bit(Device d) { return 1u << static_cast<unsigned>(d); }
inline constexpr unsigned kEveryDevice = device_bit(Device::kCpu) | device_bit(Device::kCuda);

// Whose users read a call's messages: how a message spells a dtype (the
// spec's f32, or numpy's and PyTorch's float32) and what a dtype message
// suggests to them (a conversion in JAX's or PyTorch's terms).
enum class Dialect : uint8_t { kSpec, kJax, kTorch };

// What a framework gives one call of an op: primitive answers only (an
// input's TensorRef, an attribute's raw value, whether the caller asks for an
// output, a buffer for an output or the workspaces), from which the Binder
// derives every feature of the spec (outputs on request, outputs that update
// an input, dtype attributes, optional and scalar inputs, workspaces, the
// batch), the same way for every framework.
class Source {
 public:
  virtual ~Source() = default;
  // Input `i` of the spec; nullptr for an optional input that the call omits.
  virtual const TensorRef* input(size_t i) = 0;
  // Where sizes and dtypes come from the call's descriptor instead of its
  // buffers (a legacy call): the symbol of binding index `i`, the batch count,
  // the dtype of type variable `i`. Sources of buffers with shapes return false.
  virtual bool symbol(size_t i, int64_t* value);
  virtual bool batch(int64_t* value);
  virtual bool type_var(size_t i, DType* dtype);
  // The value of attribute `i` (spec order), called `name`, of `kind`, as
  // the framework hands it over (a dtype as opgen's code: AttrKind::kDtype).
  virtual Status attr(size_t i, const char* name, AttrKind kind, AttrValue* value) = 0;
  // Whether the caller asks for the output that bit `k` of the request mask
  // stands for (the k-th output that is `optional: true` in the spec).
  virtual bool requested(size_t k);
  // The buffer of the call's result `i` (output "name", declared `declared`),
  // of `dtype` and `dims` (the batch dimensions first): checked against the
  // call's (XLA), or allocated (PyTorch). The binder numbers the results: they
  // skip the outputs left out with their omitted optional input, and those
  // not asked for where the framework has no place for them.
  virtual Status output(size_t i, const char* name, const char* declared, DType dtype, const int64_t* dims,
                        size_t rank, void** data) = 0;
  // Whether output() and workspace() make new memory (PyTorch's). Then the
  // binder asks for them only in Binder::allocate(), once every rule of the
  // call has passed, so that a refused call allocates nothing; an output
  // that updates an input in place is that input's own memory, which the
  // binder checks is the input's alone (in_place_conflict) without asking
  // the source; the results are fixed (a torch schema returns every
  // output): one not asked for is asked for with shape [0], a placeholder;
  // and the workspaces are one buffer, which the binder lays out. (XLA's
  // buffers exist before the call: they are bound as the rules reach them,
  // and a refused legacy call can poison them.)
  virtual bool allocates() const;
  // The bytes of memory of the device that allocates the call's outputs and
  // workspaces (0: unknown, or the framework allocates none): a buffer that
  // would take more is refused by the binder, with a message that names it,
  // before the allocator is asked (whose own failure may print a C++ stack
  // trace). Read once per call that allocates: it must be cheap (cached).
  virtual uint64_t memory() const;
  // The device's name in that message ("cpu", "cuda:0").
  virtual std::string device_name() const;
  // Output `i` (`name`, of `dtype`) is not asked for, where the source does
  // not allocate: told, for a source that reports the call's outputs
  // (ShapeSource); nothing by default.
  virtual void unrequested(size_t i, const char* name, DType dtype);
  // The platform the call runs on, which decides the workspaces it has.
  virtual Device device() const;
  // Scratch memory of `bytes`, valid until the call returns, for the `count`
  // workspaces `names` from the call's workspace `i` on: a source that
  // allocates is asked once, for one buffer that holds every workspace of
  // the call (laid out by the binder, each on 256 bytes as torch's allocator
  // aligns a tensor); another is asked for each workspace's own buffer (count 1).
  virtual Status workspace(size_t i, const char* const* names, size_t count, size_t bytes, void** data) = 0;
  // Workspace `i` (`name`, of `dtype`) has shape `dims` as the rules size it:
  // told on every platform, whether this one allocates it or not (one that
  // does not checks it no further), for a source that reports the call's
  // shapes (ShapeSource); nothing by default.
  virtual void workspace_shape(size_t i, const char* name, DType dtype, const int64_t* dims, size_t rank);
  // Whose users read the call's messages (the spec's spelling by default).
  virtual Dialect dialect() const;
};

// The number of results a call of an op has: its outputs, less those that
// update an optional input (`aliases[i]`: the input output i updates, or -1)
// that the call omits (`present`: bit k, the k-th optional input is given),
// and those on request (`requests[i]`: output i's bit in the request mask,
// or -1) that the caller does not ask for (`requested`).
size_t result_count(const int* aliases, const int* requests, size_t outputs, size_t required_inputs, uint64_t present,
                    uint64_t requested);

// Where a call carries its masks as numbers (the typed FFI's attributes, the
// legacy descriptor's fields): "" when the request mask `requested` (bit k:
// the caller asks for the k-th output on request) names none beyond the
// op's `requestable` ones; else the error.
std::string request_error(const char* op, int64_t requested, size_t requestable);

// Whether a call gives input `i` of an op with `required` required inputs
// (optional inputs come last), where the call carries its presence mask as a
// number (the typed FFI's attribute, the legacy descriptor's field): bit k,
// the k-th optional input is among the operands.
inline bool input_given(size_t i, size_t required, uint64_t present) {
  return i < required || ((present >> (i - required)) & 1) != 0;
}

// A derived type variable's dtype: the one `map` pairs with `from` (the
// variable it follows, which the call has bound: kUnknown after a failure).
inline DType derived(DType from, std::initializer_list<std::pair<DType, DType>> map) {
  for (const auto& [a, b] : map) {
    if (a == from) return b;
  }
  return DType::kUnknown;
}

// A chosen type variable's dtype: the one `choices` gives for the index of
// the enum attribute's value (kUnknown after a failure: index -1).
inline DType chosen(int32_t index, std::initializer_list<DType> choices) {
  return index >= 0 && static_cast<size_t>(index) < choices.size() ? choices.begin()[index] : DType::kUnknown;
}

// The index of the row of `rows` (an instantiation's dtypes, one for each
// type variable) that is `bound`, or -1: how an op with a chosen variable,
// whose instantiations are no product, numbers them.
template <size_t V, size_t N>
int row_of(const DType (&rows)[N][V], const DType (&bound)[V]) {
  for (size_t r = 0; r < N; ++r) {
    size_t v = 0;
    while (v < V && rows[r][v] == bound[v]) ++v;
    if (v == V) return static_cast<int>(r);
  }
  return -1;
}

class Binder {
 public:
  static constexpr size_t kMaxSymbols = 64;
  static constexpr size_t kMaxInputs = 64;
  static constexpr size_t kMaxOutputs = 64;
  static constexpr size_t kMaxRank = 32;
  static constexpr size_t kMaxTypeVars = 16;

  Binder(const char* op, Source& source) : op_(op), source_(source) {}
  Binder(const Binder&) = delete;
  Binder& operator=(const Binder&) = delete;

  const char* op() const { return op_; }
  // Whether the call gives input `i` (an optional input may be omitted).
  bool has_input(size_t i) { return source_.input(i) != nullptr; }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // Records `s` unless a failure is recorded already.
  void fail(Status s);
  // A generated check's result: "" or the message of an invalid argument.
  void check(const std::string& error);

  // --- dtypes: the instantiation the call selects -----------------------
  // Input `i` is of `declared`.
  void dtype(size_t i, const char* name, DType declared);
  // Input `i` is of `chosen`, the dtype enum attribute `attr` chose.
  void chosen_dtype(size_t i, const char* name, DType chosen, const char* attr);
  // Type variable `var` ("T"), bound by input `i`: its dtype, which must be
  // one of `allowed`; `*index` is its position there (-1 on a failure).
  DType type_var(size_t var, const char* var_name, size_t i, const char* name, std::initializer_list<DType> allowed,
                 int* index);
  // A type variable bound by dtype attribute `i` (`name`): its value, which
  // must be one of `allowed`; `*index` is its position there (-1 on a failure).
  DType dtype_attr(size_t i, const char* name, std::initializer_list<DType> allowed, int* index);
  // Input `i` has the dtype of type variable `var_name`, `bound` by input `bound_by`.
  void same_dtype(size_t i, const char* name, const char* var_name, const char* bound_by, DType bound);
  // Type variable `var` has `dtype` in this call: type_var records those an
  // input binds; the rules record the others (a dtype attribute's, a derived
  // one's) with this, so that type_count() and type() name every one.
  void bind_type(const char* var, DType dtype) {
    if (type_count_ < kMaxTypeVars) types_[type_count_++] = {var, dtype};
  }

  // --- inputs -------------------------------------------------------------
  class Input {
   public:
    // Its leading dimensions ('...'): the first input with them defines the
    // batch (`*count` is their product); later ones must equal them.
    Input& batch(int64_t* count);
    Input& batch();
    // Dimension `axis` (after '...') binds symbol `index` ("N") into `*value`.
    Input& bind(size_t axis, size_t index, const char* symbol, int64_t* value);
    // Dimension `axis` must be symbol `symbol` (binding index `index`), bound
    // earlier to `expected`.
    Input& dim(size_t axis, size_t index, const char* symbol, int64_t expected);
    // Dimension `axis` must be the fixed size `size`.
    Input& fixed(size_t axis, int64_t size);
    // The memory layout the body reads, and (for kRows and kStrided) the
    // strides it gets, in elements: the batch stride first where the shape has
    // '...', then one per dimension.
    Input& layout(Layout layout, int64_t* strides = nullptr);

   private:
    friend class Binder;
    Input(Binder* b, const char* name, const char* declared, size_t rank, bool has_batch, bool updated,
          const TensorRef* t);
    bool live() const { return t_ != nullptr && b_->ok(); }
    void expect(size_t axis, int64_t expected, const char* symbol, size_t index);

    Binder* b_;
    const char* name_;
    const char* declared_;
    size_t rank_;  // dimensions after '...'
    bool has_batch_;
    bool updated_;  // an output updates it in place
    const TensorRef* t_;
    size_t lead_ = 0;  // its leading ('...') dimensions
    int64_t sizes_[kMaxRank];  // each dimension after '...' as bound or checked (the first rank_ zeroed)
  };
  // What the spec says of an input besides its shape.
  enum InputFlags : unsigned { kRequired = 0, kOptional = 1, kUpdated = 2 /* an output updates it in place */ };
  // Input `i` ("name", declared `declared`: `rank` dimensions after a leading
  // '...' when `has_batch`); `*data` is its buffer (nullptr for an omitted
  // optional input).
  template <typename T>
  Input input(size_t i, const char* name, const char* declared, size_t rank, bool has_batch, T** data,
              unsigned flags = kRequired) {
    const TensorRef* t = given(i, name, flags);
    *data = t ? static_cast<T*>(t->data) : nullptr;
    return Input(this, name, declared, rank, has_batch, (flags & kUpdated) != 0, t);
  }

  // --- attributes ---------------------------------------------------------
  void attr(size_t i, const char* name, bool* value);
  void attr(size_t i, const char* name, int32_t* value);
  void attr(size_t i, const char* name, int64_t* value);
  void attr(size_t i, const char* name, float* value);
  void attr(size_t i, const char* name, double* value);
  void attr(size_t i, const char* name, Span<const int32_t>* value);
  void attr(size_t i, const char* name, Span<const int64_t>* value);
  // An enum attribute: its value's index among `values` ("a, b, c").
  template <typename E>
  void enum_attr(size_t i, const char* name, std::initializer_list<const char*> values, const char* listed, E* value) {
    int32_t index = 0;
    enum_index(i, name, values, listed, &index);
    *value = static_cast<E>(index);
  }

  // --- outputs and scratch --------------------------------------------------
  // Output `i` of `dtype`, with the batch dimensions first when `batch`, then
  // `dims`; `*data` its buffer (set by allocate() where the framework
  // allocates it: Source::allocates). Call after every input, and after the
  // checks of the output sizes.
  template <typename T>
  void output(size_t i, const char* name, const char* declared, bool batch, std::initializer_list<int64_t> dims,
              T** data) {
    *data = nullptr;
    output_buffer(i, name, declared, dtype_of<T>, batch, dims, -1, data, &assign<T>);
  }
  // Output `i` updates input `input` in place: its buffer, holding the
  // input's contents by the time the body runs, which also becomes the
  // input's pointer (`*input_data`); where the framework allocates
  // (Source::allocates), the input's own memory, which must be the input's
  // alone. An optional input that the call omits leaves the output out too
  // (nullptr, and no result of the call).
  template <typename T>
  void output_aliasing(size_t i, const char* name, const char* declared, bool batch,
                       std::initializer_list<int64_t> dims, T** data, size_t input, const T** input_data) {
    if (!has_input(input)) {
      *data = nullptr;
      leave_out(i);
      return;
    }
    void* in = const_cast<T*>(*input_data);
    // Bound at once: no framework allocates an output that updates an input.
    *data = nullptr;
    output_buffer(i, name, declared, dtype_of<T>, batch, dims, static_cast<int>(input), data, &assign<T>);
    if (ok() && *data != in) copies_[copy_count_++] = {*data, in, bytes_[i]};
    *input_data = *data;
  }
  // Output `i`, made only when the caller asks for it (bit `request` of the
  // request mask): otherwise nullptr, and no result of the call (a
  // placeholder of shape [0] where the framework's results are fixed:
  // Source::allocates).
  template <typename T>
  void output_on_request(size_t i, size_t request, const char* name, const char* declared, bool batch,
                         std::initializer_list<int64_t> dims, T** data) {
    if (ok() && !source_.requested(request)) {
      *data = nullptr;
      leave_out(i);
      unrequested(i, name, declared, dtype_of<T>);
      return;
    }
    output(i, name, declared, batch, dims, data);
  }
  // Workspace `i`: scratch memory of `dtype` T and shape (the batch
  // dimensions first when `batch`, then `dims`) for the call, at *data once
  // allocate() has run; nullptr on a platform outside `devices` (a mask of
  // device_bit), where it is not allocated at all. Its shape reaches
  // Source::workspace_shape on every platform.
  template <typename T>
  void workspace(size_t i, const char* name, bool batch, std::initializer_list<int64_t> dims, T** data,
                 unsigned devices = kEveryDevice) {
    *data = nullptr;
    request_scratch(i, name, dtype_of<T>, batch, dims, devices, data, &assign<T>);
  }
  // After the rules (Rules::bind): asks the framework for the outputs that
  // wait for it (Source::allocates), then for the workspaces, all at once
  // (one allocation where torch makes them), unless a rule refused the call.
  // A framework that allocates is asked for nothing that would take more
  // than its device's memory (Source::memory).
  void allocate();

  // --- for the bindings -----------------------------------------------------
  // Shape symbol `index` as an input bound it: its name and value (false
  // where no input bound it: an omitted optional input's, or a legacy call's).
  bool symbol(size_t index, const char** name, int64_t* value) const {
    if (!bound(index)) return false;
    *name = origins_[index].symbol;
    *value = origins_[index].value;
    return true;
  }
  // Each type variable's dtype as the call bound it (bind_type), in the
  // order the rules bind them: `k` < type_count().
  size_t type_count() const { return type_count_; }
  const char* type_name(size_t k) const { return types_[k].var; }
  DType type(size_t k) const { return types_[k].dtype; }
  // The batch's dimensions ('...') as the call gives them (none for a legacy call).
  const int64_t* batch_dims() const { return batch_dims_; }
  size_t batch_rank() const { return batch_rank_; }
  // Every output has no elements (then the body does not run).
  bool empty() const { return outputs_ > 0 && empty_; }
  // The copies behind aliased outputs, for the platform to make before the body.
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  size_t copy_count() const { return copy_count_; }
  const Copy& copy(size_t i) const { return copies_[i]; }
  // The outputs bound so far, with their bytes (for the poison of a refused legacy call).
  size_t output_count() const { return outputs_; }
  void* output_data(size_t i) const { return data_[i]; }
  size_t output_bytes(size_t i) const { return bytes_[i]; }

 private:
  // Input `i` as the call gives it (nullptr: omitted, or a failure before),
  // its name kept for the in-place rule's message.
  const TensorRef* given(size_t i, const char* name, unsigned flags);
  // Output `i` is not among the call's results: no buffer, no bytes.
  void leave_out(size_t i) {
    if (i < kMaxOutputs) {
      data_[i] = nullptr;
      bytes_[i] = 0;
    }
    ++omitted_;
  }
  template <typename T>
  static void assign(void* slot, void* data) {
    *static_cast<T**>(slot) = static_cast<T*>(data);
  }
  // Binds output `i`, or, where the framework allocates it, records it for
  // allocate(); `assign(slot, buffer)` hands its buffer to the Args.
  void output_buffer(size_t i, const char* name, const char* declared, DType dtype, bool batch,
                     std::initializer_list<int64_t> dims, int alias, void* slot, void (*assign)(void*, void*));
  // Output `i` (`name`, of `dtype`) is not asked for: Source::unrequested now,
  // or, where the source allocates, a placeholder in allocate().
  void unrequested(size_t i, const char* name, const char* declared, DType dtype);
  // The memory of input `alias`, which output `name` updates in place, where
  // the framework allocates: refused where other elements of the input or
  // another input share it (in_place_conflict).
  Status in_place(const char* name, size_t alias, void** data);
  // No buffer of the call, nor all of them together, would take more than the device's memory.
  void check_memory();
  void request_scratch(size_t i, const char* name, DType dtype, bool batch, std::initializer_list<int64_t> dims,
                       unsigned devices, void* slot, void (*assign)(void* slot, void* data));
  // A buffer's shape: the batch dimensions when `batch` (the flattened count
  // where the call gives no shapes: a legacy call), then `dims`; its rank.
  size_t shape_of(bool batch, std::initializer_list<int64_t> dims, int64_t* shape) const;
  void enum_index(size_t i, const char* name, std::initializer_list<const char*> values, const char* listed,
                  int32_t* index);
  bool read_attr(size_t i, const char* name, AttrKind kind, AttrValue* value);
  std::string who(const char* role, const char* name) const;
  // A dtype as the framework's users spell it (Source::dialect), and what a
  // dtype message suggests to them after `declared`.
  std::string spell(DType d) const;
  std::string dtype_hint(DType declared) const;
  // An input's dtype as the call gives it: spelled so, or the framework's name of one opgen lacks.
  std::string given_dtype(const TensorRef& t) const;
  // Why symbol `index` has its value, in a message: "N, bound by input 'a' dimension 0".
  std::string binding_rule(const char* symbol, size_t index) const;

  const char* op_;
  Source& source_;
  Status status_;
  // Records an input's wrong dtype (Status::WrongType) unless a failure is recorded already.
  void fail_dtype(std::string message);

  // Where each symbol was bound: the input and its axis (after '...'), and
  // the symbol's name and value; bit `index` of `bound_` says it was.
  //
  // The arrays here and below are read only where a mask or a count says they
  // were written, and are left uninitialized: every call of every binding
  // makes a Binder, and zeroing its 7 KB cost a typed-FFI call more than the
  // rest of its checks (bench/bench_simple_add.py [c], on the CPU).
  struct Origin {
    const char* input;
    size_t axis;
    bool after_batch;
    const char* symbol;
    int64_t value;
  };
  uint64_t bound_ = 0;
  // The inputs' names, the first input_count_ (given: every input is looked
  // up in order, given or not, before any output).
  const char* input_names_[kMaxInputs];
  size_t input_count_ = 0;
  static_assert(kMaxSymbols <= 64, "bound_ has a bit per symbol");
  bool bound(size_t index) const { return index < kMaxSymbols && ((bound_ >> index) & 1); }
  Origin origins_[kMaxSymbols];
  // Each type variable's dtype (bind_type), the first type_count_.
  struct TypeBinding {
    const char* var;
    DType dtype;
  };
  TypeBinding types_[kMaxTypeVars];
  size_t type_count_ = 0;
  // The batch: its source, dimensions (when the call gives shapes) and count.
  const char* batch_source_ = nullptr;
  const int64_t* batch_dims_ = nullptr;
  size_t batch_rank_ = 0;
  int64_t batch_count_ = 1;
  bool batch_known_ = false;
  // Outputs bound so far, and those left out with their optional input
  // (the call's results skip them).
  size_t outputs_ = 0;
  size_t omitted_ = 0;
  bool empty_ = true;
  void* data_[kMaxOutputs];
  size_t bytes_[kMaxOutputs];
  Copy copies_[kMaxOutputs];
  size_t copy_count_ = 0;
  // The outputs that wait for allocate() (Source::allocates), in order, and
  // their shapes, one after another in pending_dims_.
  struct Pending {
    size_t index;   // the spec's output index
    size_t result;  // the call's result index
    const char* name;
    const char* declared;
    DType dtype;
    bool requested;  // false: not asked for (Source::unrequested)
    size_t dims_at;
    size_t rank;
    void* slot;
    void (*assign)(void* slot, void* data);
  };
  static constexpr size_t kMaxPendingDims = 4 * kMaxRank;
  Pending pending_[kMaxOutputs];
  size_t pending_count_ = 0;
  int64_t pending_dims_[kMaxPendingDims];
  size_t pending_dims_used_ = 0;
  // The workspaces requested, as Source::workspaces takes them, and where
  // each one's pointer goes (set by its `assign`).
  const char* scratch_names_[kMaxOutputs];
  size_t scratch_bytes_[kMaxOutputs];
  void* scratch_slots_[kMaxOutputs];
  void (*scratch_assign_[kMaxOutputs])(void* slot, void* data);
  size_t scratch_count_ = 0;
};

}  // namespace opgen
