#include "model/model.h"

#include <algorithm>

#include "opgen/range_text.h"
#include "opgen/shape_check.h"

namespace opgen::gen {

const std::vector<DTypeInfo>& all_dtypes() {
  static const std::vector<DTypeInfo> table = {
#define OPGEN_DTYPE_INFO(e, name, cpp, xla, python, size, ...) {DType::e, #e, #name, #cpp, #xla, #python, size},
      OPGEN_DTYPES(OPGEN_DTYPE_INFO)
#undef OPGEN_DTYPE_INFO
  };
  return table;
}

const DTypeInfo& info(DType dtype) {
  for (const DTypeInfo& i : all_dtypes()) {
    if (i.dtype == dtype) return i;
  }
  return all_dtypes().front();  // unreachable: the table covers the enum
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const DTypeInfo& i : all_dtypes()) {
    if (name == i.name) return i.dtype;
  }
  return std::nullopt;
}

std::string dtype_names_text() {
  std::string out;
  for (const DTypeInfo& i : all_dtypes()) out += (out.empty() ? "" : ", ") + std::string(i.name);
  return out;
}

const std::vector<AttrTypeInfo>& all_attr_types() {
  static const std::vector<AttrTypeInfo> table = {
      {AttrType::kBool, "bool", "bool", "bool_", "?", "bool", "bool", 1},
      {AttrType::kI32, "i32", "int32_t", "int32", "i", "int", "int", 4},
      {AttrType::kI64, "i64", "int64_t", "int64", "q", "int", "int", 8},
      {AttrType::kF32, "f32", "float", "float32", "f", "float", "float", 4},
      {AttrType::kF64, "f64", "double", "float64", "d", "float", "float", 8},
      // An enum travels as its index (i32) in the descriptor (and to the
      // stable-ABI torch kernel, which cannot take a string on torch 2.9).
      {AttrType::kEnum, "enum", "int32_t", "int32", "i", "str", "str", 4},
      // An array's descriptor field is its length (u32); the elements follow
      // the fixed fields. torch 2.9's stable ABI takes no list: the torch
      // kernel gets the array as a CPU tensor.
      {AttrType::kI32Array, "i32[]", "int32_t", "int32", "I", "int[]", "Sequence[int]", 4},
      {AttrType::kI64Array, "i64[]", "int64_t", "int64", "I", "int[]", "Sequence[int]", 4},
      // A dtype travels as its code (its index in the dtype table) as an i32:
      // a typed-FFI attribute, a descriptor field; torch passes a ScalarType.
      {AttrType::kDtype, "dtype", "int32_t", "int32", "i", "ScalarType", "object", 4},
  };
  return table;
}

const AttrTypeInfo& info(AttrType type) {
  for (const AttrTypeInfo& i : all_attr_types()) {
    if (i.type == type) return i;
  }
  return all_attr_types().front();
}

std::optional<AttrType> parse_attr_type(std::string_view name) {
  for (const AttrTypeInfo& i : all_attr_types()) {
    if (name == i.name) return i.type;
  }
  return std::nullopt;
}

bool is_array(AttrType type) { return type == AttrType::kI32Array || type == AttrType::kI64Array; }

AttrType element_type(AttrType type) {
  if (type == AttrType::kI32Array) return AttrType::kI32;
  if (type == AttrType::kI64Array) return AttrType::kI64;
  return type;
}

bool numeric_less(const AttrValue& a, const AttrValue& b) {
  if (std::holds_alternative<int64_t>(a) && std::holds_alternative<int64_t>(b)) {
    return std::get<int64_t>(a) < std::get<int64_t>(b);
  }
  auto real = [](const AttrValue& v) {
    return std::holds_alternative<int64_t>(v) ? static_cast<double>(std::get<int64_t>(v)) : std::get<double>(v);
  };
  return real(a) < real(b);
}

std::string number_text(const AttrValue& v) {
  if (std::holds_alternative<int64_t>(v)) return std::to_string(std::get<int64_t>(v));
  // The runtime's spelling of a number in its messages, so that a range the
  // generator writes into a message reads as the value the runtime prints.
  return opgen::number_text(std::get<double>(v));
}

const char* constraint_operator(Constraint::Kind kind) {
  switch (kind) {
    case Constraint::Kind::kEq: return "==";
    case Constraint::Kind::kNe: return "!=";
    case Constraint::Kind::kLt: return "<";
    case Constraint::Kind::kLe: return "<=";
    case Constraint::Kind::kGt: return ">";
    case Constraint::Kind::kGe: return ">=";
    case Constraint::Kind::kIn: return "in";
  }
  return "?";
}

std::string range_text(const Attr& a) {
  return opgen::range_text(a.min ? number_text(*a.min) : "", a.min_exclusive, a.max ? number_text(*a.max) : "",
                           a.max_exclusive);
}

std::string values_range_text(const Tensor& t) {
  return opgen::range_text(t.values_min ? t.values_min_text : "", t.values_min_exclusive,
                           t.values_max ? t.values_max_text : "", t.values_max_exclusive);
}

size_t Op::requested_outputs() const {
  return static_cast<size_t>(
      std::count_if(outputs.begin(), outputs.end(), [](const Tensor& t) { return t.on_request(); }));
}

bool Tensor::on_platform(Platform p) const {
  return std::find(platforms.begin(), platforms.end(), p) != platforms.end();
}

bool Op::has_platform(Platform p) const {
  return std::find(platforms.begin(), platforms.end(), p) != platforms.end();
}

bool Op::has_api_version(int v) const {
  return std::find(api_versions.begin(), api_versions.end(), v) != api_versions.end();
}

bool Op::splittable_by_batch() const {
  return std::all_of(outputs.begin(), outputs.end(), [](const Tensor& t) { return t.batch; }) &&
         std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.batch; });
}

bool Op::has_legacy_api() const {
  return std::any_of(api_versions.begin(), api_versions.end(), [](int v) { return v != 4; });
}

std::vector<std::pair<Platform, int>> Op::handlers() const {
  std::vector<std::pair<Platform, int>> out;
  for (Platform p : platforms) {
    for (int v : api_versions) {
      if (p == Platform::kCpu && (v == 1 || v == 2)) continue;
      out.emplace_back(p, v);
    }
  }
  return out;
}

bool Op::torch_lowered() const {
  return std::any_of(attrs.begin(), attrs.end(), [](const Attr& a) { return a.type == AttrType::kEnum || is_array(a.type); });
}

bool Op::has_batch() const {
  for (const Tensor& t : inputs) if (t.batch) return true;
  for (const Tensor& t : outputs) if (t.batch) return true;
  return false;
}

size_t Op::required_inputs() const {
  size_t n = 0;
  while (n < inputs.size() && !inputs[n].optional) ++n;
  return n;
}

std::vector<std::map<std::string, DType>> Op::instantiations() const {
  std::vector<std::map<std::string, DType>> out = {{}};
  for (const TypeVar& v : type_vars) {
    if (v.derived()) continue;
    std::vector<std::map<std::string, DType>> next;
    for (const auto& partial : out) {
      std::vector<DType> reach = v.dtypes;
      if (v.chosen()) {
        reach.clear();
        for (const TypeVar::Choice& c : v.choices) {
          const DType d = c.dtype ? *c.dtype : partial.at(c.var);
          if (std::find(reach.begin(), reach.end(), d) == reach.end()) reach.push_back(d);
        }
      }
      for (DType d : reach) {
        auto m = partial;
        m[v.name] = d;
        next.push_back(m);
      }
    }
    out = next;
  }
  for (auto& m : out) {
    for (const TypeVar& v : type_vars) {
      if (!v.derived()) continue;
      const TypeVar& from = *std::find_if(type_vars.begin(), type_vars.end(), [&](const TypeVar& f) { return f.name == v.from; });
      const size_t k = std::find(from.dtypes.begin(), from.dtypes.end(), m[v.from]) - from.dtypes.begin();
      m[v.name] = v.map[k];
    }
  }
  return out;
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t Op::opaque_fingerprint(const std::string& package) const {
  // The descriptor holds the symbols (i64 each) then the attributes, so the
  // signature names exactly those fields, in order, with their types.
  std::string sig = package + "." + name + "/v" + std::to_string(kOpaqueLayoutVersion) + "(";
  for (const TypeVar& v : type_vars) {
    // A derived variable and one a dtype attribute binds have no field of
    // their own, but they name which instantiation the call runs.
    if (v.derived()) {
      sig += v.name + "=" + v.from + "{";
      for (DType d : v.map) sig += std::string(info(d).name) + ",";
      sig += "},";
      continue;
    }
    sig += v.name + (v.attr.empty() ? "" : "=" + v.attr) + ":dtype{";
    for (DType d : v.dtypes) sig += std::string(info(d).name) + ",";
    for (const TypeVar::Choice& c : v.choices) sig += c.value + "->" + (c.dtype ? info(*c.dtype).name : c.var) + ",";
    sig += "},";
  }
  if (optional_inputs() > 0) {
    sig += "present_:u32{";  // bit i: the i-th optional input
    for (size_t i = required_inputs(); i < inputs.size(); ++i) sig += inputs[i].name + ",";
    sig += "},";
  }
  if (requested_outputs() > 0) {
    sig += "requested_:u32{";  // bit i: the caller asks for the i-th output it may ask for
    for (const Tensor& o : outputs) {
      if (o.on_request()) sig += o.name + ",";
    }
    sig += "},";
  }
  if (has_batch()) sig += std::string(kBatchField) + ":i64,";
  for (const SymbolBinding& s : symbols) sig += s.symbol + ":i64,";
  for (const Attr& a : attrs) {
    sig += a.name + ":" + info(a.type).name;
    if (a.type == AttrType::kEnum || a.type == AttrType::kDtype) {
      sig += "{";  // the order of the values fixes their indices (the dtypes allowed)
      for (const std::string& v : a.values) sig += v + ",";
      sig += "}";
    }
    sig += ",";
  }
  // Legacy calls pass each workspace as one more result buffer.
  // (on the platforms it names, where not all of the op's).
  for (const Tensor& w : workspaces) {
    sig += "workspace:" + w.name;
    if (w.platforms.size() != platforms.size()) {
      for (Platform p : w.platforms) sig += p == Platform::kCuda ? "@cuda" : "@cpu";
    }
    sig += ",";
  }
  sig += ")";
  return fnv1a64(sig);
}

OpaqueLayout Op::opaque_layout(const std::string& package) const {
  OpaqueLayout layout;
  auto add = [&](const std::string& field, OpaqueField::Kind kind, const char* code) {
    layout.fields.push_back({field, kind, code, ""});
    return &layout.fields.back();
  };
  // The dtype of each type variable, as its index in the dtype table.
  // (A derived variable follows from its own; a dtype attribute carries its
  // variable's code, among the attributes.)
  for (const TypeVar& v : type_vars) {
    if (v.free() && v.attr.empty()) add("dtype_" + v.name, OpaqueField::Kind::kDtype, "B")->type_var = v.name;
  }
  // Bit i set: the i-th optional input is given (and is among the buffers).
  if (optional_inputs() > 0) add("present_", OpaqueField::Kind::kPresent, "I");
  // Bit i set: the caller asks for the i-th output it may ask for (and it is among the results).
  if (requested_outputs() > 0) add("requested_", OpaqueField::Kind::kRequested, "I");
  if (has_batch()) add(kBatchField, OpaqueField::Kind::kBatch, "q");
  for (const SymbolBinding& s : symbols) add(s.symbol, OpaqueField::Kind::kSymbol, "q");
  // An enum travels as its index; an array as its length here, with its
  // elements after the fixed fields, in attribute order.
  for (const Attr& a : attrs) {
    const OpaqueField::Kind kind = is_array(a.type) ? OpaqueField::Kind::kArray
                                   : a.type == AttrType::kEnum ? OpaqueField::Kind::kEnum
                                                               : OpaqueField::Kind::kAttr;
    add(a.name, kind, info(a.type).struct_format);
  }
  layout.fingerprint = opaque_fingerprint(package);
  return layout;
}

}  // namespace opgen::gen
