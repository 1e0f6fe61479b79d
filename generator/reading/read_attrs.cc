// Reading `attrs:`: each attribute's type, range, values, size and default,
// the default checked against the rest.
#include <algorithm>
#include <climits>
#include <cmath>
#include <sstream>

#include "model/names.h"
#include "reading/read_attrs.h"
#include "reading/read_spec.h"
#include "reading/read_tensors.h"

namespace opgen::gen {
namespace {

// A scalar of `type` (never an enum or an array).
std::optional<AttrValue> read_scalar_value(SpecFile& f, AttrType type, const YAML::Node& node,
                                           const std::string& what) {
  switch (type) {
    case AttrType::kBool: {
      auto v = f.boolean(node, what);
      if (v) return AttrValue{*v};
      return std::nullopt;
    }
    case AttrType::kI32:
    case AttrType::kI64: {
      auto v = f.integer(node, what);
      if (!v) return std::nullopt;
      if (type == AttrType::kI32 && (*v < INT32_MIN || *v > INT32_MAX)) {
        f.error(f.at(node), what + " is out of range for i32");
        return std::nullopt;
      }
      return AttrValue{*v};
    }
    case AttrType::kF32:
    case AttrType::kF64: {
      auto v = f.real(node, what);
      if (!v) return std::nullopt;
      if (type == AttrType::kF32 && std::fabs(*v) > 3.4028234663852886e38) {
        f.error(f.at(node), what + " is out of range for f32");
        return std::nullopt;
      }
      if (type == AttrType::kF32 && *v != 0.0 && static_cast<float>(*v) == 0.0f) {
        f.error(f.at(node), what + " underflows to 0 in f32");
        return std::nullopt;
      }
      return AttrValue{*v};
    }
    default:
      return std::nullopt;
  }
}

// Whether `v` lies in the attribute's range; reports it at `node` if not.
bool check_in_range(SpecFile& f, const Attr& a, const AttrValue& v, const YAML::Node& node,
                    const std::string& what) {
  const bool below = a.min && (numeric_less(v, *a.min) || (a.min_exclusive && !numeric_less(*a.min, v)));
  const bool above = a.max && (numeric_less(*a.max, v) || (a.max_exclusive && !numeric_less(v, *a.max)));
  if (below || above) {
    f.error(f.at(node), what + " must be " + range_text(a));
    return false;
  }
  return true;
}

// A value of attribute `a` (a default), checked against its values, range
// and size.
std::optional<AttrValue> read_attr_value(SpecFile& f, const Attr& a, const YAML::Node& node,
                                         const std::string& what) {
  if (a.type == AttrType::kEnum || a.type == AttrType::kDtype) {
    std::optional<std::string> s = f.string(node, what);
    if (!s) return std::nullopt;
    if (std::find(a.values.begin(), a.values.end(), *s) == a.values.end()) {
      std::string fix = closest_match(*s, a.values);
      std::string listed;
      for (const std::string& v : a.values) listed += (listed.empty() ? "" : ", ") + v;
      f.error(f.at(node), what + " is '" + *s + "', which is not one of its values (" + listed + ")" +
                              (fix.empty() ? std::string() : "; did you mean '" + fix + "'?"));
      return std::nullopt;
    }
    return AttrValue{*s};
  }
  if (is_array(a.type)) {
    if (!f.expect_sequence(node, what)) return std::nullopt;
    std::vector<int64_t> out;
    bool ok = true;
    for (const YAML::Node& e : node) {
      std::optional<AttrValue> v = read_scalar_value(f, element_type(a.type), e, "an element of " + what);
      if (!v) {
        ok = false;
        continue;
      }
      ok = check_in_range(f, a, *v, e, "element " + std::to_string(out.size()) + " of " + what) && ok;
      out.push_back(std::get<int64_t>(*v));
    }
    for (size_t i = 0; ok && a.unique && i < out.size(); ++i) {
      if (std::find(out.begin(), out.begin() + i, out[i]) != out.begin() + i) {
        f.error(f.at(node), what + " lists " + std::to_string(out[i]) + " twice; attribute '" + a.name +
                                "' is unique (its elements must differ)");
        ok = false;
      }
    }
    if (ok && a.size && static_cast<int64_t>(out.size()) != *a.size) {
      f.error(f.at(node), what + " has " + std::to_string(out.size()) + " elements; attribute '" + a.name +
                              "' has size " + std::to_string(*a.size));
      ok = false;
    }
    if (!ok) return std::nullopt;
    return AttrValue{out};
  }
  std::optional<AttrValue> v = read_scalar_value(f, a.type, node, what);
  if (!v || a.type == AttrType::kBool) return v;
  if (!check_in_range(f, a, *v, node, what)) return std::nullopt;
  return v;
}

// `values:` of an enum attribute: distinct snake_case names, each a C++
// enumerator (enumerator_name: a reserved one, vLLM's `auto`, with a
// trailing '_'); the strings the callers pass are the names as written.
bool read_enum_values(SpecFile& f, const YAML::Node& node, const std::string& what, Attr& a) {
  if (!f.expect_sequence(node, "the values of " + what)) return false;
  bool ok = true;
  for (const YAML::Node& v : node) {
    std::optional<std::string> s = f.snake_name(v, "a value of " + what, /*reserved_ok=*/true);
    if (!s) {
      ok = false;
    } else if (std::find(a.values.begin(), a.values.end(), *s) != a.values.end()) {
      f.error(f.at(v), "value '" + *s + "' is listed twice for " + what);
      ok = false;
    } else {
      a.values.push_back(*s);
    }
  }
  if (node.size() == 0) {
    f.error(f.at(node), "the values of " + what + " must list at least one value");
    ok = false;
  }
  return ok;
}

// `values:` of a dtype attribute: distinct dtypes, kept as the spec spells them.
bool read_dtype_values(SpecFile& f, const YAML::Node& node, const std::string& what, Attr& a) {
  if (!f.expect_sequence(node, "the values of " + what)) return false;
  bool ok = true;
  for (const YAML::Node& v : node) {
    std::optional<DType> d = read_dtype_name(f, v, "a value of " + what);
    if (!d) {
      ok = false;
    } else if (std::find(a.values.begin(), a.values.end(), info(*d).name) != a.values.end()) {
      f.error(f.at(v), "dtype '" + std::string(info(*d).name) + "' is listed twice for " + what);
      ok = false;
    } else {
      a.values.push_back(info(*d).name);
    }
  }
  if (node.size() == 0) {
    f.error(f.at(node), "the values of " + what + " must list at least one dtype");
    ok = false;
  }
  return ok;
}

}  // namespace

std::optional<BoundKey> read_bound_key(SpecFile& f, const YAML::Node& node, const std::string& key,
                                       const YAML::Node& value, const std::string& what) {
  const bool exclusive = key.rfind("exclusive_", 0) == 0;
  const std::string twin = exclusive ? key.substr(10) : "exclusive_" + key;
  if (node[twin]) {
    f.error(f.at(value), what + " has both '" + key + "' and '" + twin + "'; a bound is one or the other");
    return std::nullopt;
  }
  return BoundKey{key == "min" || key == "exclusive_min", exclusive};
}

std::optional<Attr> read_attr(SpecFile& f, const std::string& name, const YAML::Node& node,
                              const Location& name_at) {
  const std::string what = "attribute '" + name + "'";
  Attr a;
  a.name = name;
  a.where = name_at;
  bool ok = f.checked_snake_name(name, name_at, "attribute name");
  if (!f.expect_map(node, what)) return std::nullopt;
  auto fields = f.entries(node, what, {"type", "default", "doc", "min", "max", "exclusive_min", "exclusive_max", "values",
                                      "size", "unique"});
  f.require(node, what, {"type"});
  bool have_type = false;
  for (const auto& [key, value] : fields) {
    if (key != "type") continue;
    std::optional<std::string> s = f.string(value, "the type of " + what);
    if (!s) return std::nullopt;
    std::optional<AttrType> type = parse_attr_type(*s);
    if (!type) {
      std::string fix = dtype_alias(*s);
      if (fix.empty() || !parse_attr_type(fix)) fix = closest_match(*s, {"bool", "i32", "i64", "f32", "f64", "enum", "i32[]", "i64[]", "dtype"});
      f.error(f.at(value), "unsupported type '" + *s + "' for " + what +
                               (fix.empty() ? std::string(" (supported: bool, i32, i64, f32, f64, enum, i32[], i64[], dtype)")
                                            : "; did you mean '" + fix + "'?"));
      return std::nullopt;
    }
    a.type = *type;
    have_type = true;
  }
  if (!have_type) return std::nullopt;
  const bool enum_ = a.type == AttrType::kEnum;
  const bool array = is_array(a.type);
  const bool dtype = a.type == AttrType::kDtype;
  if (enum_ && !node["values"]) {
    f.error(f.at(node), "enum " + what + " is missing the required key 'values' (the strings it may take)");
    ok = false;
  }
  if (dtype && !node["values"]) {
    f.error(f.at(node), "dtype " + what + " is missing the required key 'values' (the dtypes it may take)");
    ok = false;
  }
  // The properties first: the default is checked against them.
  for (const auto& [key, value] : fields) {
    if (key == "values") {
      if (dtype) {
        ok = read_dtype_values(f, value, what, a) && ok;
      } else if (!enum_) {
        f.error(f.at(value), "'values' applies only to an enum or dtype attribute; " + what + " is " + info(a.type).name);
        ok = false;
      } else {
        ok = read_enum_values(f, value, what, a) && ok;
      }
    } else if (key == "size") {
      std::optional<int64_t> size;
      if (!array) {
        f.error(f.at(value), "'size' applies only to an array attribute (i32[], i64[]); " + what + " is " + info(a.type).name);
      } else if ((size = f.integer(value, "the size of " + what)) && (*size < 0 || *size > UINT32_MAX)) {
        // Descriptors carry an array's length as u32.
        f.error(f.at(value), "the size of " + what + " must be from 0 to 4294967295");
        size.reset();
      }
      if (size) a.size = size;
      else ok = false;
    } else if (key == "unique") {
      std::optional<bool> unique = f.boolean(value, "'unique' of " + what);
      if (unique && *unique && !array) {
        f.error(f.at(value), "'unique' applies only to an array attribute (i32[], i64[]); " + what + " is " + info(a.type).name);
        ok = false;
      } else if (unique) {
        a.unique = *unique;
      } else {
        ok = false;
      }
    } else if (key == "min" || key == "max" || key == "exclusive_min" || key == "exclusive_max") {
      if (a.type == AttrType::kBool || enum_ || dtype) {
        f.error(f.at(value), "'" + key + "' does not apply to the " + info(a.type).name + " " + what);
        ok = false;
        continue;
      }
      const std::optional<BoundKey> which = read_bound_key(f, node, key, value, what);
      if (!which) {
        ok = false;
        continue;
      }
      const bool lower = which->lower, exclusive = which->exclusive;
      std::optional<AttrValue> bound = read_scalar_value(f, element_type(a.type), value, "the " + key + " of " + what);
      if (!bound) {
        ok = false;
        continue;
      }
      (lower ? a.min : a.max) = bound;
      (lower ? a.min_exclusive : a.max_exclusive) = exclusive;
    } else if (key == "doc") {
      std::optional<std::string> s = f.string(value, "the doc of " + what);
      if (s) a.doc = *s;
      else ok = false;
    }
  }
  if (ok && a.min && a.max &&
      (numeric_less(*a.max, *a.min) || ((a.min_exclusive || a.max_exclusive) && !numeric_less(*a.min, *a.max)))) {
    f.error(a.where, "the range of " + what + " (" + range_text(a) + ") holds no value");
    ok = false;
  }
  if (ok && node["default"]) {
    a.default_value = read_attr_value(f, a, node["default"], "the default of " + what);
    if (!a.default_value) ok = false;
  }
  if (!ok) return std::nullopt;
  return a;
}

}  // namespace opgen::gen
