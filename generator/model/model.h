// The checked model of a spec: what the reader produces and every template
// consumes. Objects are built once by the spec reader and then only read
// (passed as const&), so nothing downstream can disagree about an op.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "model/diagnostics.h"
#include "opgen/dtype_table.h"

namespace opgen::gen {

// The spec format this generator reads (the `opgen:` key of every spec).
inline constexpr int kSpecFormatVersion = 1;

// The layout version of the legacy opaque descriptor (docs/spec.md, "The
// legacy opaque descriptor").
inline constexpr int kOpaqueLayoutVersion = 1;

// ---------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------

// The rows of opgen's dtype table (runtime/include/opgen/dtype_table.h, which
// the runtime's opgen::DType expands too), in its order: a legacy descriptor
// carries a dtype as its index here.
enum class DType {
#define OPGEN_DTYPE_ENUMERATOR(e, ...) e,
  OPGEN_DTYPES(OPGEN_DTYPE_ENUMERATOR)
#undef OPGEN_DTYPE_ENUMERATOR
};

struct DTypeInfo {
  DType dtype;
  const char* enumerator;  // opgen::DType's: kF32
  const char* name;      // spelling in specs: f32
  const char* cpp;       // type the kernel sees: float
  const char* ffi;       // xla::ffi::DataType enumerator: F32
  const char* python;    // numpy's, jax.numpy's and torch's name: float32
  int size;              // bytes per element
};

const std::vector<DTypeInfo>& all_dtypes();
const DTypeInfo& info(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);
// The spec spellings in the table's order, for messages: "f16, bf16, ..., f8e5m2".
std::string dtype_names_text();

// ---------------------------------------------------------------------------
// Attributes (compile-time scalars of the op)
// ---------------------------------------------------------------------------

// kEnum is a string chosen from the attribute's `values`; the kernel sees a
// C++ enum class. The arrays are integer lists of any length; the kernel
// sees an opgen::Span over host memory.
// kDtype is a dtype chosen from the attribute's `values` (dtype names): it
// binds a type variable (`Q: {attr: out_dtype}`), so the kernel sees it as
// that template parameter and Args holds no field for it.
enum class AttrType { kBool, kI32, kI64, kF32, kF64, kEnum, kI32Array, kI64Array, kDtype };

struct AttrTypeInfo {
  AttrType type;
  const char* name;          // spelling in specs: f32
  const char* cpp;           // C++ type of the value (of one element, for arrays): float
  const char* numpy;         // numpy type of the value (of one element): float32
  const char* struct_format; // Python struct code of the descriptor field: f
  const char* torch_schema;  // type in a torch schema: float
  const char* py_type;       // Python annotation: float
  int size;                  // bytes of the field in the opaque descriptor
};

const std::vector<AttrTypeInfo>& all_attr_types();
const AttrTypeInfo& info(AttrType type);
std::optional<AttrType> parse_attr_type(std::string_view name);

bool is_array(AttrType type);
// The element type of an array attribute type, e.g. kI64 for kI64Array.
AttrType element_type(AttrType type);

using AttrValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>>;

// Orders two numbers (int64_t or double) exactly when both are integers.
bool numeric_less(const AttrValue& a, const AttrValue& b);

// A number as the spec's messages and the generated docs and checks spell it:
// an integer as itself, a real as Python's repr does (0.0, 1e-06).
std::string number_text(const AttrValue& v);

// ---------------------------------------------------------------------------
// Ops
// ---------------------------------------------------------------------------

// An output dimension computed from shape symbols: `2*D`, `D/H`, `N+1`,
// `(T+511)//512`. `/` must divide exactly (the generated code checks it at run
// time); `//` rounds down, as Python's. In a
// constraint, also `%` (the remainder) and integer attributes as symbols.
struct Expr {
  enum class Kind { kInt, kSymbol, kAdd, kSub, kMul, kDiv, kFloorDiv, kMod };
  Kind kind = Kind::kInt;
  int64_t value = 0;
  std::string symbol;
  std::shared_ptr<const Expr> lhs, rhs;
};

// One dimension of a declared shape: a fixed size, a shape symbol, or (in
// outputs) an expression over symbols.
struct Dim {
  std::optional<int64_t> fixed;       // set for a literal size
  std::string symbol;                 // set for a symbol
  std::shared_ptr<const Expr> expr;   // set for an expression
  std::string text;                   // as written in the spec
  Location where;
};

// A type variable: one spec, several dtype instantiations. It is bound by
// the dtype of a required input (the default), by a dtype attribute (`attr`:
// the caller chooses, e.g. a quantised output's dtype), chosen by an enum
// attribute through a map (`attr` and `map`: vLLM's kv_cache_dtype, `auto`
// the key's dtype, `fp8` e4m3fn), or derived from an earlier input-bound
// variable (`from`, `map`: an accumulation type).
struct TypeVar {
  // What one value of a choosing enum attribute chooses: a dtype, or the
  // dtype of an earlier variable that an input binds.
  struct Choice {
    std::string value;           // the attribute's value
    std::optional<DType> dtype;  // the dtype it chooses, or
    std::string var;             // the variable whose dtype it chooses
    Location where;
  };
  std::string name;
  // The dtypes it takes: as listed; a dtype attribute's values; for a derived
  // variable, the distinct dtypes of its map in the order of `from`'s dtypes;
  // for a chosen one, those its choices reach, in their order.
  std::vector<DType> dtypes;
  std::string from;       // derived: the variable it is a function of
  std::vector<DType> map; // derived: its dtype for each dtype of `from`, in their order
  std::string attr;       // bound by this dtype attribute, or chosen by this enum attribute
  std::vector<Choice> choices;  // chosen: one for each value of the enum attribute, in its order
  Location where;
  bool derived() const { return !from.empty(); }
  bool chosen() const { return !choices.empty(); }
  // Whether it multiplies the instantiations (derived ones follow theirs).
  bool free() const { return from.empty(); }
};

// How an input's memory may be laid out (the spec's `layout`): dense
// row-major, or any stride but 1 in the last dimension (`rows`: a row of a
// larger matrix, a head of a fused qkv tensor), or any strides. The kernel
// gets the strides of a rows or strided input.
enum class Layout { kContiguous, kRows, kStrided };

inline const std::vector<std::string>& layout_names() {
  static const std::vector<std::string> names = {"contiguous", "rows", "strided"};
  return names;
}

enum class Platform { kCuda, kCpu };

struct Tensor {
  std::string name;
  DType dtype = DType::kF32;  // when type_var is empty
  std::string type_var;       // the type variable that gives the dtype, or ""
  bool batch = false;         // shape starts with `...`: any number of leading batch dims
  std::vector<Dim> shape;     // the dimensions after `...`
  // Inputs: may be omitted (the kernel sees nullptr). Outputs: left out
  // unless the caller asks for it (`optional: true`, then on_request()), or
  // with the optional input it updates in place (set by resolve).
  bool optional = false;
  Layout layout = Layout::kContiguous;  // inputs only
  // Integer inputs only: the range their values lie in (an index's), which
  // the bindings cannot check (the values are on the device): the body
  // guards it (Args::<name>_in_range), tests draw valid values from it.
  std::shared_ptr<const Expr> values_min, values_max;
  std::string values_min_text, values_max_text;  // as the spec writes them
  bool values_min_exclusive = false, values_max_exclusive = false;
  // `unique: true`: the values that lie in the range are distinct (no two
  // entries name one slot), a precondition the bindings cannot check either;
  // the body may rely on it (one writer per slot).
  bool values_unique = false;
  std::string alias;          // outputs only: the input whose buffer it updates in place, or ""
  // Outputs only (`unordered: true`): the order of its elements is unspecified
  // (atomics on one platform, a loop on another): tests compare it as a multiset.
  bool unordered = false;
  // Workspaces only: the platforms that allocate it (`platforms:`; resolve
  // fills in the op's when the spec names none); elsewhere the body sees nullptr.
  std::vector<Platform> platforms;
  Location platforms_where;
  std::string doc;
  Location where;

  // An output the caller asks for (`optional: true`), not one left out with
  // the optional input it updates.
  bool on_request() const { return optional && alias.empty(); }
  bool on_platform(Platform p) const;
};

struct Attr {
  std::string name;
  AttrType type;
  std::optional<AttrValue> default_value;
  // The range (of each element, for arrays), checked where the value is
  // given: an int64_t for integer types (exact to 2^63), else a double;
  // each bound inclusive (`min`, `max`) or exclusive (`exclusive_min`, ...).
  std::optional<AttrValue> min, max;
  bool min_exclusive = false, max_exclusive = false;
  std::vector<std::string> values; // kEnum: the allowed strings; the kernel sees their index
  std::optional<int64_t> size;     // arrays: the required length, if the spec fixes one
  bool unique = false;             // arrays: no element may appear twice
  std::string doc;
  Location where;
};

// An attribute's range as messages and docs state it: ">= 0.0", "> 0",
// "in [-2, -1]", "in (0.0, 1.0]"; "" when it has none.
std::string range_text(const Attr& a);

// An integer input's value range, likewise: "in [0, S)", ">= 0"; "" when none.
std::string values_range_text(const Tensor& t);

// A rule between an op's sizes and integer attributes (the spec's
// `constraints:`), checked wherever the op is called: `H % KVH == 0`,
// `R <= head_size`, `Dh in [64, 128, 256]`. An expression that cannot be
// evaluated (a division by zero, an overflow) fails it.
struct Constraint {
  enum class Kind { kEq, kNe, kLt, kLe, kGt, kGe, kIn };
  Kind kind = Kind::kEq;
  std::shared_ptr<const Expr> lhs, rhs;  // rhs: not for kIn
  std::vector<int64_t> set;              // kIn: the allowed values
  std::string text;                      // as the spec writes it
  Location where;
};

// `split:` one set of shape symbols that devices may cut, each by the same
// number of shards, with no communication, besides the batch: the heads of
// attention, H with KVH (each device then holds whole query groups).
struct Split {
  std::string name;
  std::vector<std::string> symbols;  // in spec order
  Location where;
};

// The comparison of a constraint as C++ and Python spell it ("==", ..., "in").
const char* constraint_operator(Constraint::Kind kind);

// Where a shape symbol takes its value: the first input dimension that names
// it. Every later use of the symbol in an input is checked equal at run time;
// in an output it sizes the result.
// Optional inputs never bind: a symbol, a type variable or the batch
// dimensions must come from a required input, so they exist in every call.
struct SymbolBinding {
  std::string symbol;
  int input = 0;  // index into Op::inputs
  int axis = 0;
};

// How jax.vmap maps the op (jax.ffi.ffi_call's vmap_method).
inline const std::vector<std::string>& vmap_methods() {
  static const std::vector<std::string> methods = {"sequential", "sequential_unrolled",
                                                   "expand_dims", "broadcast_all"};
  return methods;
}

// The most dtype combinations of an op's type variables.
inline constexpr size_t kMaxInstantiations = 64;

// The name of the flattened batch count in Args when a shape uses `...`.
inline constexpr const char* kBatchField = "batch";

// The legacy opaque descriptor of an op (opgen/opaque.h): a 16-byte header
// (magic, layout version, reserved, fingerprint), then the fixed fields in
// this order -- a u8 dtype code per type variable, the presence mask (u32)
// when the op has optional inputs, the request mask (u32) when it has outputs
// on request, the batch count (i64) when a shape has
// '...', the shape symbols (i64), the attributes (an enum as its i32 index,
// an array as its u32 length) -- then the elements of each array attribute.
// Little-endian and unpadded. One layout feeds the C++ decoder and the
// Python encoder.
struct OpaqueField {
  std::string name;
  enum class Kind { kDtype, kPresent, kRequested, kBatch, kSymbol, kAttr, kEnum, kArray } kind;
  const char* struct_code;   // Python struct code (its width: opgen/opaque.h lays the fields out)
  std::string type_var;      // kDtype: the type variable
};

struct OpaqueLayout {
  std::vector<OpaqueField> fields;
  uint64_t fingerprint = 0;
};

// One input of an op's backward op (`backward: inputs:`): a forward input or
// output by name, or `grad(<output>)`, the cotangent of a forward output.
struct BackwardArg {
  enum class Kind { kInput, kOutput, kCotangent };
  Kind kind = Kind::kInput;
  std::string name;
  Location where;
};

// `backward:`: another op of the package computes this op's gradients. The
// forward's attributes that the backward op also declares are passed on.
struct Backward {
  std::string op;
  Location where;
  std::vector<BackwardArg> inputs;  // the backward op's inputs, in its order
  // Each backward output, with a forward input it is the gradient of (an
  // output may be the gradient of several inputs: one pair each).
  std::vector<std::pair<std::string, std::string>> gradients;
  std::vector<Location> gradient_where;
  std::vector<std::string> unused;  // backward outputs the forward discards
  std::vector<Location> unused_where;
  std::vector<std::string> no_gradient;  // floating inputs declared without one
  std::vector<Location> no_gradient_where;
};

// `state:`: an object the body keeps for each device (a library handle, an
// algorithm cache): the body defines it and make_state, the bindings make it
// once per device, the first time a call runs there, and hand it to every call.
struct OpState {
  std::string doc;
  // The platforms whose calls get one (resolve fills in the op's when the
  // spec names none); elsewhere the body sees nullptr.
  std::vector<Platform> platforms;
  Location platforms_where;
  Location where;
};

struct Op {
  std::string name;
  std::string doc;
  std::string spec_path;  // as shown in stamps and diagnostics
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  std::vector<Attr> attrs;
  // Scratch buffers for the body (partial results of a split reduction, say),
  // sized by expressions over shape symbols and integer attributes; each
  // framework allocates them (XLA as extra results, torch's caching allocator).
  std::vector<Tensor> workspaces;
  std::vector<Platform> platforms;  // in spec order, no duplicates
  std::vector<int> api_versions;    // in spec order, no duplicates
  // As the spec says; unset: compatible unless the op has a workspace.
  std::optional<bool> command_buffer_compatible;
  std::string vmap_method = "sequential";
  // Where the spec's `xla:` section stands (the spec itself when it has
  // none): the vmap and partitioning rules report there.
  Location xla_where;
  // As the spec says; unset: splittable() decides.
  std::optional<bool> batch_partitionable;
  std::vector<TypeVar> type_vars;      // in declaration order
  std::vector<SymbolBinding> symbols;  // in binding order
  std::vector<Constraint> constraints;  // in spec order
  std::vector<Split> splits;            // in spec order
  std::optional<Backward> backward;
  std::optional<OpState> state;
  // `differentiable: false`: no output depends differentiably on an input
  // (indices, a router's choice), so under autograd and jax.grad the op runs
  // and its outputs are constants. True (the default) without a backward:
  // differentiating through the op is an error that names it.
  bool differentiable = true;

  bool has_batch() const;
  // The inputs up to the first optional one (optional inputs come last).
  size_t required_inputs() const;
  size_t optional_inputs() const { return inputs.size() - required_inputs(); }
  // The outputs a call makes only when the caller asks for them (on_request).
  size_t requested_outputs() const;
  // Every assignment of dtypes to the type variables (one empty map when
  // there are none), in declaration order, the first varying slowest: over
  // the free variables, a chosen one over the distinct dtypes its choices
  // reach given the earlier ones, each derived one following its own. The
  // bindings number the kernels' instantiations so.
  std::vector<std::map<std::string, DType>> instantiations() const;
  bool has_platform(Platform p) const;
  bool has_api_version(int v) const;
  bool has_legacy_api() const;
  // Every (platform, api_version) pair that gets a custom call handler, in
  // the spec's order of each. XLA:CPU runs only api_version 3 of the legacy
  // ABI (1 and 2 are refused there), so a CPU handler exists for 4 and 3 alone.
  std::vector<std::pair<Platform, int>> handlers() const;
  // Whether the PyTorch kernels register a lowered schema (names.h's
  // torch_kernel_name): the stable ABI of torch 2.9 cannot carry an enum
  // (a str) or an array attribute, which the lowered one takes as an index
  // and a CPU tensor.
  bool torch_lowered() const;
  // Whether XLA may capture the CUDA handler in a command buffer (a CUDA graph).
  bool cmd_buffer_compatible() const { return command_buffer_compatible.value_or(true); }
  // Whether each device may run the op on its shard of the batch ('...'),
  // with no communication: every output has the batch dimensions (an output
  // without them, a sum over the batch, would need one) and some input does.
  bool splittable_by_batch() const;
  bool batch_partitioned() const { return batch_partitionable.value_or(splittable_by_batch()); }
  // Identifies the opaque layout of this op: two ops (or two revisions of
  // one) whose descriptors differ in any field get different fingerprints.
  uint64_t opaque_fingerprint(const std::string& package) const;
  OpaqueLayout opaque_layout(const std::string& package) const;
};

struct Package {
  std::string name;
  std::string torch_namespace;
  std::string spec_path;
};

// 64-bit FNV-1a; the same function is used for every fingerprint.
uint64_t fnv1a64(std::string_view bytes);

}  // namespace opgen::gen
