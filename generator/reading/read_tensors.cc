// Reading `types:`, `inputs:` and `outputs:`: type variables, tensors, and
// the dimensions of their shapes.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>

#include "model/names.h"
#include "reading/read_attrs.h"
#include "reading/read_spec.h"
#include "reading/read_tensors.h"
#include "reading/shape_expr.h"

namespace opgen::gen {

// The spec spelling of a dtype written as numpy, C or torch names it, or "".
std::string dtype_alias(const std::string& s) {
  static const std::map<std::string, std::string> aliases = [] {
    // The names the dtype table gives each dtype (XLA's; numpy's and torch's),
    // and the informal ones people write.
    std::map<std::string, std::string> m = {
        {"half", "f16"},      {"fp16", "f16"},     {"float", "f32"},     {"fp32", "f32"},    {"double", "f64"},
        {"fp64", "f64"},      {"int", "i32"},      {"long", "i64"},      {"byte", "u8"},     {"bool_", "bool"},
        {"pred", "bool"},     {"s32", "i32"},      {"s64", "i64"},       {"I32", "i32"},     {"I64", "i64"},
        {"fp8_e4m3", "f8e4m3fn"}, {"e4m3", "f8e4m3fn"}, {"fp8_e5m2", "f8e5m2"}, {"e5m2", "f8e5m2"}};
    for (const DTypeInfo& i : all_dtypes()) {
      for (const char* name : {i.ffi, i.python}) m.emplace(name, i.name);
    }
    return m;
  }();
  auto it = aliases.find(s);
  return it == aliases.end() ? "" : it->second;
}

namespace {

// Reads one dimension of `t`'s shape. `first` says whether it is the
// shape's first entry (where `...` may stand).
bool read_dim(SpecFile& f, const YAML::Node& dim, const std::string& what, bool is_output,
              bool first, Tensor& t) {
  Dim d;
  d.where = f.at(dim);
  if (dim.IsNull()) {
    f.error(d.where, "a dimension of " + what +
                         " is empty or null in YAML (null, ~ and NULL read as null); "
                         "give a size or a shape symbol");
    return false;
  }
  // A quoted dimension reads like a plain one: quotes help an expression
  // that YAML would otherwise misread (one starting with '*', say).
  if (!dim.IsScalar()) {
    f.error(d.where, "a dimension of " + what + " must be a size, a shape symbol or an expression");
    return false;
  }
  const std::string& text = dim.Scalar();
  d.text = text;
  if (text == "...") {
    if (!first) {
      f.error(d.where, "'...' (the batch dimensions) may only lead the shape of " + what);
      return false;
    }
    t.batch = true;
    return true;
  }
  if (!text.empty() && (is_ascii_digit(text[0]) || text[0] == '-') &&
      text.find_first_of("+*/() ") == std::string::npos && text.find('-', 1) == std::string::npos) {
    errno = 0;
    char* end = nullptr;
    const long long parsed = std::strtoll(text.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE) {
      f.error(d.where, "a fixed dimension of " + what + " must be an integer, not '" + text + "'");
      return false;
    }
    const std::optional<int64_t> size = parsed;
    if (*size < 1) {
      f.error(d.where, "a fixed dimension of " + what + " must be at least 1, not " + std::to_string(*size));
      return false;
    }
    d.fixed = *size;
  } else if (is_symbol_identifier(text)) {
    if (is_reserved_name(text)) {
      f.error(d.where, "shape symbol '" + text + "' of " + what +
                           " is reserved in C++, Python or the generated code");
      return false;
    }
    d.symbol = text;
  } else if (text.find_first_of("+-*/()") != std::string::npos) {
    if (!is_output) {
      f.error(d.where, "the shape of " + what + " has the expression '" + text +
                           "'; inputs take sizes and symbols, expressions go in outputs");
      return false;
    }
    std::string error;
    d.expr = parse_shape_expr(text, error);
    if (!d.expr) {
      f.error(d.where, "bad shape expression '" + text + "' in " + what + ": " + error);
      return false;
    }
  } else {
    f.error(d.where, "'" + text + "' in the shape of " + what +
                         " is neither a size, a shape symbol (a name such as N, with no '__' and "
                         "no trailing '_'), an expression such as 2*D, nor '...'");
    return false;
  }
  t.shape.push_back(d);
  return true;
}

std::optional<Tensor> read_tensor(SpecFile& f, const std::string& name, const YAML::Node& node,
                                  const std::string& role, const Location& name_at,
                                  const std::vector<TypeVar>& type_vars) {
  const std::string what = role + " '" + name + "'";
  Tensor t;
  t.name = name;
  t.where = name_at;
  bool ok = f.checked_snake_name(name, name_at, role + " name");
  if (!f.expect_map(node, what)) return std::nullopt;
  const auto fields = role == "input"    ? f.entries(node, what, {"dtype", "shape", "doc", "optional", "layout", "min",
                                                                   "max", "exclusive_min", "exclusive_max", "unique"})
                      : role == "output" ? f.entries(node, what, {"dtype", "shape", "doc", "alias", "optional", "unordered"})
                                         : f.entries(node, what, {"dtype", "shape", "doc", "platforms"});
  // An output that aliases an input takes that input's dtype and shape.
  if (role == "output" && node["alias"]) {
    std::optional<std::string> input = f.snake_name(node["alias"], "the input that " + what + " aliases");
    if (!input) return std::nullopt;
    for (const char* key : {"dtype", "shape"}) {
      if (node[key]) {
        f.error(f.at(node[key]), what + " aliases input '" + *input + "' and takes its dtype and shape; remove '" + key + "'");
        ok = false;
      }
    }
    // The caller's input is updated whether or not it asks: an update is no
    // result to ask for (it is left out with an optional input it updates).
    if (node["optional"]) {
      f.error(f.at(node["optional"]), what + " updates input '" + *input + "' in place, so it cannot be 'optional' "
                                      "(asked for by the caller); it is left out only when it updates an optional "
                                      "input that the call omits");
      ok = false;
    }
    // Its elements stay where the input holds them.
    if (node["unordered"]) {
      f.error(f.at(node["unordered"]), what + " updates input '" + *input + "' in place, so its order is the "
                                       "input's; remove 'unordered'");
      ok = false;
    }
    t.alias = *input;
    if (const YAML::Node doc = node["doc"]) {
      std::optional<std::string> s = f.string(doc, "the doc of " + what);
      if (s) t.doc = *s;
      else ok = false;
    }
    if (!ok) return std::nullopt;
    return t;
  }
  f.require(node, what, {"dtype", "shape"});
  bool have_dtype = false, have_shape = false;
  YAML::Node unique_node;  // `unique: true`, checked once the dtype and the range are known
  for (const auto& [key, value] : fields) {
    if (key == "dtype") {
      std::optional<std::string> s = f.string(value, "the dtype of " + what);
      if (!s) {
        ok = false;
        continue;
      }
      const auto var = std::find_if(type_vars.begin(), type_vars.end(),
                                    [&](const TypeVar& v) { return v.name == *s; });
      if (var != type_vars.end()) {
        t.type_var = *s;
        have_dtype = true;
        continue;
      }
      std::optional<DType> d = parse_dtype(*s);
      if (!d) {
        std::string message = "unsupported dtype '" + *s + "' for " + what;
        std::string fix = dtype_alias(*s);
        message += !fix.empty() ? "; did you mean '" + fix + "'?"
                   : type_vars.empty() ? " (supported: " + dtype_names_text() + ", or a type variable declared under 'types')"
                                       : " (neither a dtype nor a type variable declared under 'types')";
        f.error(f.at(value), message);
        ok = false;
        continue;
      }
      t.dtype = *d;
      have_dtype = true;
    } else if (key == "shape") {
      if (!f.expect_sequence(value, "the shape of " + what)) {
        ok = false;
        continue;
      }
      have_shape = true;
      bool first = true;
      for (const YAML::Node& dim : value) {
        ok = read_dim(f, dim, what, role != "input", first, t) && ok;
        first = false;
      }
    } else if (key == "doc") {
      std::optional<std::string> s = f.string(value, "the doc of " + what);
      if (s) t.doc = *s;
      else ok = false;
    } else if (key == "optional") {
      std::optional<bool> b = f.boolean(value, "'optional' of " + what);
      if (b) t.optional = *b;
      else ok = false;
    } else if (key == "unordered") {
      std::optional<bool> b = f.boolean(value, "'unordered' of " + what);
      if (b) t.unordered = *b;
      else ok = false;
    } else if (key == "platforms") {
      if (!read_platform_list(f, value, "'platforms' of " + what, t.platforms)) ok = false;
      t.platforms_where = f.at(value);
    } else if (key == "min" || key == "max" || key == "exclusive_min" || key == "exclusive_max") {
      // The range of an index's values: an integer or an expression over
      // shape symbols and integer attributes (checked when the op resolves).
      const std::optional<BoundKey> which = read_bound_key(f, node, key, value, what);
      if (!which) {
        ok = false;
        continue;
      }
      const bool lower = which->lower, exclusive = which->exclusive;
      std::optional<std::string> text = value.IsScalar() ? std::optional<std::string>(value.Scalar()) : std::nullopt;
      std::string error;
      std::shared_ptr<const Expr> bound = text ? parse_shape_expr(*text, error) : nullptr;
      if (!bound) {
        f.error(f.at(value), "the " + key + " of " + what + " must be an integer or an expression over shape symbols" +
                                 (error.empty() ? std::string() : " (" + error + ")"));
        ok = false;
        continue;
      }
      (lower ? t.values_min : t.values_max) = bound;
      (lower ? t.values_min_text : t.values_max_text) = *text;
      (lower ? t.values_min_exclusive : t.values_max_exclusive) = exclusive;
    } else if (key == "unique") {
      // The values in the range are distinct: a precondition, like the range.
      std::optional<bool> unique = f.boolean(value, "'unique' of " + what);
      if (!unique) {
        ok = false;
        continue;
      }
      t.values_unique = *unique;
      if (*unique) unique_node = value;
    } else if (key == "layout") {
      std::optional<std::string> s = f.string(value, "the layout of " + what);
      const auto& names = layout_names();
      const auto found = s ? std::find(names.begin(), names.end(), *s) : names.end();
      if (found != names.end()) {
        t.layout = static_cast<Layout>(found - names.begin());
      } else {
        if (s) {
          std::string fix = closest_match(*s, names);
          f.error(f.at(value), "unknown layout '" + *s + "' for " + what +
                                   (fix.empty() ? std::string(" (one of: contiguous, rows, strided)")
                                                : "; did you mean '" + fix + "'?"));
        }
        ok = false;
      }
    }
  }
  if (ok && have_dtype && (t.values_min || t.values_max)) {
    // Only integers index; the type variable's dtypes are checked when it resolves.
    const bool integer = !t.type_var.empty() || t.dtype == DType::kI32 || t.dtype == DType::kI64 || t.dtype == DType::kU8;
    if (!integer) {
      f.error(t.where, what + " has a value range, but its dtype " + info(t.dtype).name +
                           " is not an integer type (a range describes index values)");
      ok = false;
    }
  }
  if (ok && have_dtype && t.values_unique) {
    // `unique` qualifies an index's range: an integer input that states one.
    const auto is_integer = [](DType d) { return d == DType::kI32 || d == DType::kI64 || d == DType::kU8; };
    std::string not_integer;  // what makes the dtype not an index's, or ""
    if (t.type_var.empty()) {
      if (!is_integer(t.dtype)) not_integer = std::string(info(t.dtype).name);
    } else {
      const auto v = std::find_if(type_vars.begin(), type_vars.end(),
                                  [&](const TypeVar& tv) { return tv.name == t.type_var; });
      const auto d = std::find_if(v->dtypes.begin(), v->dtypes.end(), [&](DType x) { return !is_integer(x); });
      if (d != v->dtypes.end()) not_integer = t.type_var + ", which takes " + info(*d).name;
    }
    if (!not_integer.empty()) {
      f.error(f.at(unique_node), "'unique' applies only to an index input (of an integer dtype: i32, i64, u8, or a "
                                 "type variable over only those); " + what + " is " + not_integer);
      ok = false;
    } else if (!t.values_min && !t.values_max) {
      f.error(f.at(unique_node), what + " is 'unique' but states no value range: 'unique' says that its values in "
                                 "the range are distinct; give the range (min or exclusive_min, max or exclusive_max)");
      ok = false;
    }
  }
  if (ok && have_shape && t.layout == Layout::kRows && t.shape.empty()) {
    f.error(f.at(node["layout"]), what + " has layout 'rows' but no dimension to hold a row");
    ok = false;
  }
  if (!ok || !have_dtype || !have_shape) return std::nullopt;
  return t;
}

}  // namespace

// A dtype named at `node` as the spec spells it; reported (naming `what`) if not.
std::optional<DType> read_dtype_name(SpecFile& f, const YAML::Node& node, const std::string& what) {
  std::optional<std::string> s = f.string(node, what);
  if (!s) return std::nullopt;
  if (std::optional<DType> d = parse_dtype(*s)) return d;
  const std::string fix = dtype_alias(*s);
  f.error(f.at(node), "unsupported dtype '" + *s + "' for " + what +
                          (fix.empty() ? " (supported: " + dtype_names_text() + ")"
                                       : "; did you mean '" + fix + "'?"));
  return std::nullopt;
}

// The `map` of a type variable that an enum attribute chooses: each of the
// attribute's values (checked against it once the attributes are read) to a
// dtype or an earlier variable that an input binds.
static bool read_choices(SpecFile& f, const YAML::Node& map, const std::vector<TypeVar>& earlier, TypeVar& v) {
  const std::string what = "'map' of type variable '" + v.name + "'";
  if (!f.expect_map(map, what)) return false;
  bool ok = true;
  for (auto it = map.begin(); it != map.end(); ++it) {
    TypeVar::Choice c;
    c.where = f.at(it->first);
    std::optional<std::string> value = f.string(it->first, "a key of " + what);
    std::optional<std::string> chosen = f.string(it->second, "a value of " + what);
    if (!value || !chosen) {
      ok = false;
      continue;
    }
    c.value = *value;
    const auto var = std::find_if(earlier.begin(), earlier.end(), [&](const TypeVar& o) { return o.name == *chosen; });
    if (std::optional<DType> d = parse_dtype(*chosen)) {
      c.dtype = d;
    } else if (var != earlier.end() && var->free() && var->attr.empty()) {
      c.var = *chosen;
    } else {
      f.error(f.at(it->second), what + " maps '" + c.value + "' to '" + *chosen + "', which is " +
                                    (var != earlier.end() ? "a type variable that no input binds"
                                                          : "neither a dtype (" + dtype_names_text() +
                                                                ") nor a type variable declared before it"));
      ok = false;
    }
    v.choices.push_back(std::move(c));  // refused, it chooses nothing: no second error says that it is missing
  }
  return ok;
}

// A type variable written as a mapping: `{from: T, map: {f16: f32, ...}}`, a
// function of an earlier input-bound variable; `{attr: name}`, bound by a
// dtype attribute (whose values resolve() gives it); or `{attr: name, map:
// {value: dtype or variable, ...}}`, chosen by an enum attribute.
static bool read_bound_type_var(SpecFile& f, const YAML::Node& node, const std::vector<TypeVar>& earlier, TypeVar& v) {
  const std::string what = "type variable '" + v.name + "'";
  const auto fields = f.entries(node, what, {"from", "map", "attr"});
  const bool has_attr = static_cast<bool>(node["attr"]);
  if (has_attr && node["from"]) {
    f.error(f.at(node), what + " is bound by an attribute ('attr', with a 'map' for an enum attribute) or derived "
                               "('from' and 'map'), not both");
    return false;
  }
  if (has_attr) {
    std::optional<std::string> a = f.string(node["attr"], "the attribute of " + what);
    if (!a) return false;
    v.attr = *a;
    return !node["map"] || read_choices(f, node["map"], earlier, v);
  }
  f.require(node, what, {"from", "map"});
  if (!node["from"] || !node["map"]) return false;
  std::optional<std::string> from = f.string(node["from"], "'from' of " + what);
  if (!from) return false;
  const auto source = std::find_if(earlier.begin(), earlier.end(), [&](const TypeVar& o) { return o.name == *from; });
  if (source == earlier.end()) {
    f.error(f.at(node["from"]), "'from' of " + what + " names '" + *from +
                                    "', which is not a type variable declared before it");
    return false;
  }
  if (!source->free() || !source->attr.empty()) {
    f.error(f.at(node["from"]), "'from' of " + what + " names '" + *from + "', which is " +
                                    (source->free() ? "bound by an attribute" : "itself derived") +
                                    "; a derived variable is a function of a variable an input binds");
    return false;
  }
  v.from = *from;
  const YAML::Node map = node["map"];
  if (!f.expect_map(map, "'map' of " + what)) return false;
  bool ok = true;
  std::vector<std::optional<DType>> image(source->dtypes.size());
  for (auto it = map.begin(); it != map.end(); ++it) {
    std::optional<DType> key = read_dtype_name(f, it->first, "a key of 'map' of " + what);
    std::optional<DType> value = read_dtype_name(f, it->second, "a value of 'map' of " + what);
    if (!key || !value) {
      ok = false;
      continue;
    }
    const auto k = std::find(source->dtypes.begin(), source->dtypes.end(), *key);
    if (k == source->dtypes.end()) {
      f.error(f.at(it->first), "'map' of " + what + " maps " + info(*key).name + ", which " + *from +
                                   " does not take");
      ok = false;
    } else {
      image[k - source->dtypes.begin()] = value;
    }
  }
  for (size_t k = 0; k < image.size(); ++k) {
    if (image[k]) continue;
    if (ok) {
      f.error(f.at(map), "'map' of " + what + " gives no dtype for " + info(source->dtypes[k]).name + ", which " +
                             *from + " takes");
    }
    ok = false;
  }
  if (!ok) return false;
  for (const std::optional<DType>& d : image) {
    v.map.push_back(*d);
    if (std::find(v.dtypes.begin(), v.dtypes.end(), *d) == v.dtypes.end()) v.dtypes.push_back(*d);
  }
  return true;
}

// `types:` maps each type variable to the dtypes it ranges over.
bool read_type_vars(SpecFile& f, const YAML::Node& node, std::vector<TypeVar>& out) {
  if (!f.expect_map(node, "'types'")) return false;
  bool ok = true;
  for (auto it = node.begin(); it != node.end(); ++it) {
    TypeVar v;
    v.where = f.at(it->first);
    if (!it->first.IsScalar() || !is_symbol_identifier(it->first.Scalar()) ||
        is_reserved_name(it->first.Scalar())) {
      f.error(v.where, "a type variable needs a valid name, such as T");
      ok = false;
      continue;
    }
    v.name = it->first.Scalar();
    if (std::any_of(out.begin(), out.end(), [&](const TypeVar& o) { return o.name == v.name; })) {
      f.error(v.where, "type variable '" + v.name + "' is declared twice");
      ok = false;
      continue;
    }
    // Also numpy's and torch's names: the Python descriptions name dtypes so.
    if (parse_dtype(v.name) || !dtype_alias(v.name).empty()) {
      f.error(v.where, "type variable '" + v.name + "' has the name of a dtype");
      ok = false;
      continue;
    }
    if (it->second.IsMap()) {
      ok = read_bound_type_var(f, it->second, out, v) && ok;
      out.push_back(v);
      continue;
    }
    const std::string what = "the dtypes of type variable '" + v.name + "'";
    if (!f.expect_sequence(it->second, what)) {
      ok = false;
      continue;
    }
    const YAML::Node list = it->second;  // a named copy: `it->second` is a temporary
    for (const YAML::Node& d : list) {
      std::optional<std::string> s = f.string(d, "a dtype of type variable '" + v.name + "'");
      std::optional<DType> dtype = s ? parse_dtype(*s) : std::nullopt;
      if (!dtype) {
        if (s) {
          std::string fix = dtype_alias(*s);
          f.error(f.at(d), "unsupported dtype '" + *s + "' for type variable '" + v.name + "'" +
                               (fix.empty() ? " (supported: " + dtype_names_text() + ")"
                                            : "; did you mean '" + fix + "'?"));
        }
        ok = false;
      } else if (std::find(v.dtypes.begin(), v.dtypes.end(), *dtype) != v.dtypes.end()) {
        f.error(f.at(d), "dtype '" + *s + "' is listed twice for type variable '" + v.name + "'");
        ok = false;
      } else {
        v.dtypes.push_back(*dtype);
      }
    }
    if (it->second.IsSequence() && it->second.size() == 0) {
      f.error(f.at(it->second), "type variable '" + v.name + "' must list at least one dtype");
      ok = false;
    }
    out.push_back(v);
  }
  return ok;
}

// Reads `inputs:` or `outputs:`.
bool read_tensors(SpecFile& f, const YAML::Node& node, const std::string& section,
                  const std::string& role, const std::vector<TypeVar>& type_vars,
                  std::vector<Tensor>& out) {
  if (!f.expect_map(node, "'" + section + "'")) return false;
  if (node.size() == 0) {
    f.error(f.at(node), "'" + section + "' must name at least one " + role);
    return false;
  }
  bool ok = true;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) {
      f.error(f.at(it->first), role + " names must be plain names");
      ok = false;
      continue;
    }
    std::optional<Tensor> t =
        read_tensor(f, it->first.Scalar(), it->second, role, f.at(it->first), type_vars);
    if (t) out.push_back(*t);
    else ok = false;
  }
  return ok;
}

}  // namespace opgen::gen
