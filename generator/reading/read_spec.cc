// The reader's entry points: a spec's top-level keys read section by
// section (read_tensors.h, read_attrs.h, read_backward.h) into the model
// (model.h), which the resolve stage then checks as a whole
// (resolving/resolve.h); and the package settings.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "model/names.h"
#include "reading/read_attrs.h"
#include "reading/read_backward.h"
#include "reading/read_spec.h"
#include "reading/read_tensors.h"
#include "reading/shape_expr.h"
#include "reading/spec_file.h"

namespace opgen::gen {
namespace {

std::string platform_alias(const std::string& s) {
  static const std::map<std::string, std::string> aliases = {
      {"gpu", "cuda"}, {"GPU", "cuda"}, {"CUDA", "cuda"}, {"nvidia", "cuda"},
      {"host", "cpu"}, {"Host", "cpu"}, {"CPU", "cpu"}};
  auto it = aliases.find(s);
  if (it != aliases.end()) return it->second;
  return closest_match(s, {"cuda", "cpu"});
}

// The `opgen:` format version, which every spec carries.
bool check_format_version(SpecFile& f, const YAML::Node& root) {
  const YAML::Node v = root["opgen"];
  if (!v) return false;  // reported by require()
  std::optional<int64_t> version = f.integer(v, "the format version 'opgen'");
  if (!version) return false;
  if (*version > kSpecFormatVersion) {
    f.error(f.at(v), "spec format version " + std::to_string(*version) +
                         " is newer than this opgen reads (" + std::to_string(kSpecFormatVersion) +
                         "); update opgen");
    return false;
  }
  if (*version < 1) {
    // Version 1 is the first; when a later one changes the format, older
    // specs will be upgraded here (with a warning) or refused with the
    // command that migrates them.
    f.error(f.at(v), "spec format version " + std::to_string(*version) + " does not exist; the first, and the one this opgen reads, is " +
                         std::to_string(kSpecFormatVersion));
    return false;
  }
  return true;
}

void read_xla(SpecFile& f, const YAML::Node& node, Op& op, bool& ok) {
  if (!f.expect_map(node, "'xla'")) {
    ok = false;
    return;
  }
  for (const auto& [key, value] : f.entries(node, "'xla'", {"api_versions", "command_buffer_compatible",
                                                            "vmap_method", "batch_partitionable"})) {
    if (key == "api_versions") {
      if (!f.expect_sequence(value, "'api_versions'")) {
        ok = false;
        continue;
      }
      op.api_versions.clear();
      for (const YAML::Node& v : value) {
        std::optional<int64_t> version = f.integer(v, "an api_version");
        if (!version) {
          ok = false;
        } else if (*version < 1 || *version > 4) {
          f.error(f.at(v), "unsupported api_version " + std::to_string(*version) +
                               " (1, 2, 3: legacy custom call with an opaque descriptor; "
                               "4: typed XLA FFI)");
          ok = false;
        } else if (op.has_api_version(static_cast<int>(*version))) {
          f.error(f.at(v), "api_version " + std::to_string(*version) + " is listed twice");
          ok = false;
        } else {
          op.api_versions.push_back(static_cast<int>(*version));
        }
      }
      if (value.size() == 0) {
        f.error(f.at(value), "'api_versions' must list at least one version");
        ok = false;
      }
    } else if (key == "command_buffer_compatible") {
      std::optional<bool> b = f.boolean(value, "'command_buffer_compatible'");
      if (b) op.command_buffer_compatible = *b;
      else ok = false;
    } else if (key == "batch_partitionable") {
      std::optional<bool> b = f.boolean(value, "'batch_partitionable'");
      if (b) op.batch_partitionable = *b;
      else ok = false;
    } else if (key == "vmap_method") {
      std::optional<std::string> m = f.string(value, "'vmap_method'");
      const auto& methods = vmap_methods();
      if (m && std::find(methods.begin(), methods.end(), *m) != methods.end()) {
        op.vmap_method = *m;
      } else {
        if (m) {
          std::string fix = closest_match(*m, methods);
          f.error(f.at(value), "unknown vmap_method '" + *m + "'" +
                                   (fix.empty() ? std::string(" (one of: sequential, sequential_unrolled, expand_dims, broadcast_all)")
                                                : "; did you mean '" + fix + "'?"));
        }
        ok = false;
      }
    }
  }
}

// `constraints:`: a list of rules between sizes and integer attributes.
void read_constraints(SpecFile& f, const YAML::Node& node, Op& op, bool& ok) {
  if (!f.expect_sequence(node, "'constraints'")) {
    ok = false;
    return;
  }
  for (const YAML::Node& c : node) {
    std::optional<std::string> text = f.string(c, "a constraint");
    if (!text) {
      ok = false;
      continue;
    }
    std::string error;
    std::optional<Constraint> constraint = parse_constraint(*text, error);
    if (!constraint) {
      f.error(f.at(c), "bad constraint '" + *text + "': " + error);
      ok = false;
      continue;
    }
    constraint->where = f.at(c);
    op.constraints.push_back(*constraint);
  }
}

// `split:` name: [symbols], the dimensions devices may cut together.
void read_splits(SpecFile& f, const YAML::Node& node, Op& op, bool& ok) {
  if (!f.expect_map(node, "'split'")) {
    ok = false;
    return;
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    Split split;
    split.where = f.at(it->first);
    std::optional<std::string> name = f.snake_name(it->first, "split name");
    if (!name || !f.expect_sequence(it->second, "split '" + *name + "'")) {
      ok = false;
      continue;
    }
    split.name = *name;
    // (A Node of its own: `it->second` lives in a proxy that dies with its
    // full-expression, so a range-for over it reads a dead object.)
    const YAML::Node symbols = it->second;
    for (const YAML::Node& s : symbols) {
      std::optional<std::string> symbol = f.string(s, "a symbol of split '" + split.name + "'");
      if (symbol) split.symbols.push_back(*symbol);
      else ok = false;
    }
    op.splits.push_back(split);
  }
}

// `state: {doc: ..., platforms: [...]}`: what the body keeps per device.
void read_state(SpecFile& f, const YAML::Node& node, Op& op, bool& ok) {
  if (!f.expect_map(node, "'state'")) {
    ok = false;
    return;
  }
  OpState state;
  state.where = f.at(node);
  f.require(node, "'state'", {"doc"});
  for (const auto& [key, value] : f.entries(node, "'state'", {"doc", "platforms"})) {
    if (key == "doc") {
      std::optional<std::string> s = f.string(value, "the doc of 'state'");
      if (s) state.doc = *s;
      else ok = false;
    } else if (key == "platforms") {
      if (!read_platform_list(f, value, "'platforms' of 'state'", state.platforms)) ok = false;
      state.platforms_where = f.at(value);
    }
  }
  if (!node["doc"]) ok = false;
  op.state = std::move(state);
}

void read_platforms(SpecFile& f, const YAML::Node& node, Op& op, bool& ok) {
  op.platforms.clear();
  ok = read_platform_list(f, node, "'platforms'", op.platforms) && ok;
}

}  // namespace

bool read_platform_list(SpecFile& f, const YAML::Node& node, const std::string& what, std::vector<Platform>& out) {
  if (!f.expect_sequence(node, what)) return false;
  bool ok = true;
  for (const YAML::Node& p : node) {
    std::optional<std::string> s = f.string(p, "a platform");
    if (!s) {
      ok = false;
      continue;
    }
    std::optional<Platform> platform;
    if (*s == "cuda") platform = Platform::kCuda;
    if (*s == "cpu") platform = Platform::kCpu;
    if (!platform) {
      std::string fix = platform_alias(*s);
      f.error(f.at(p), "unknown platform '" + *s + "'" +
                           (fix.empty() ? " (supported: cuda, cpu)" : "; did you mean '" + fix + "'?"));
      ok = false;
    } else if (std::find(out.begin(), out.end(), *platform) != out.end()) {
      f.error(f.at(p), "platform '" + *s + "' is listed twice");
      ok = false;
    } else {
      out.push_back(*platform);
    }
  }
  if (node.size() == 0) {
    f.error(f.at(node), what + " must list at least one platform");
    ok = false;
  }
  return ok;
}

namespace {

// A type variable that enum attribute `a` chooses: a choice for each of its
// values and none for another; the choices in the attribute's order, and the
// dtypes they reach.
bool bind_choices(SpecFile& f, const Attr& a, const std::vector<TypeVar>& earlier, TypeVar& v) {
  const std::string what = "'map' of type variable '" + v.name + "'";
  std::string listed;
  for (const std::string& value : a.values) listed += (listed.empty() ? "" : ", ") + value;
  bool ok = true;
  std::vector<TypeVar::Choice> ordered;
  for (const std::string& value : a.values) {
    const auto c = std::find_if(v.choices.begin(), v.choices.end(), [&](const auto& x) { return x.value == value; });
    if (c == v.choices.end()) {
      f.error(v.where, what + " gives no dtype for '" + value + "', a value of attribute '" + a.name + "' (" +
                           listed + ")");
      ok = false;
    } else {
      ordered.push_back(*c);
    }
  }
  for (const TypeVar::Choice& c : v.choices) {
    if (std::find(a.values.begin(), a.values.end(), c.value) == a.values.end()) {
      f.error(c.where, what + " maps '" + c.value + "', which is not a value of attribute '" + a.name + "' (" +
                           listed + ")");
      ok = false;
    }
  }
  if (!ok) return false;
  v.choices = std::move(ordered);
  auto reach = [&](DType d) {
    if (std::find(v.dtypes.begin(), v.dtypes.end(), d) == v.dtypes.end()) v.dtypes.push_back(d);
  };
  for (const TypeVar::Choice& c : v.choices) {
    if (c.dtype) {
      reach(*c.dtype);
    } else if (!c.var.empty()) {
      for (DType d : std::find_if(earlier.begin(), earlier.end(), [&](const TypeVar& o) { return o.name == c.var; })
                         ->dtypes) {
        reach(d);
      }
    }
  }
  return true;
}

// Each type variable written `{attr: name}` takes the values of that dtype
// attribute; each dtype attribute binds exactly one variable (else the
// caller's choice would reach nothing). One written `{attr: name, map:
// {...}}` is chosen by that enum attribute. `refused` names the attributes
// that are declared but were not read (their errors are already reported): a
// variable bound by one of them draws no second, false error.
bool bind_dtype_attrs(SpecFile& f, Op& op, const std::set<std::string>& refused) {
  bool ok = true;
  std::map<std::string, std::string> bound;  // attribute -> its variable
  for (TypeVar& v : op.type_vars) {
    if (v.attr.empty()) continue;
    const auto a = std::find_if(op.attrs.begin(), op.attrs.end(), [&](const Attr& x) { return x.name == v.attr; });
    if (a == op.attrs.end() && refused.count(v.attr)) {
      ok = false;
    } else if (a == op.attrs.end()) {
      f.error(v.where, "type variable '" + v.name + "' is bound by attribute '" + v.attr +
                           "', which is not declared under 'attrs'");
      ok = false;
    } else if (v.chosen() && a->type != AttrType::kEnum) {
      bound.emplace(v.attr, v.name);  // no second error that the attribute binds nothing
      f.error(v.where, "type variable '" + v.name + "' is chosen by attribute '" + v.attr + "' through a 'map', but '" +
                           v.attr + "' is " + info(a->type).name + ", not an enum attribute" +
                           (a->type == AttrType::kDtype ? " (a dtype attribute binds its variable itself: drop 'map')"
                                                        : ""));
      ok = false;
    } else if (v.chosen()) {
      const std::vector<TypeVar> earlier(op.type_vars.begin(), op.type_vars.begin() + (&v - op.type_vars.data()));
      ok = bind_choices(f, *a, earlier, v) && ok;
    } else if (a->type == AttrType::kEnum) {
      f.error(v.where, "type variable '" + v.name + "' is bound by attribute '" + v.attr + "', which is enum: an enum "
                           "attribute chooses a variable through a map of its values ({attr: " + v.attr +
                           ", map: {value: dtype or type variable, ...}})");
      ok = false;
    } else if (a->type != AttrType::kDtype) {
      f.error(v.where, "type variable '" + v.name + "' is bound by attribute '" + v.attr + "', which is " +
                           info(a->type).name + ", not a dtype attribute ({type: dtype, values: [...]})");
      ok = false;
    } else if (!bound.emplace(v.attr, v.name).second) {
      f.error(v.where, "type variable '" + v.name + "' is bound by attribute '" + v.attr +
                           "', which already binds type variable '" + bound[v.attr] + "'");
      ok = false;
    } else {
      for (const std::string& d : a->values) v.dtypes.push_back(*parse_dtype(d));
    }
  }
  for (const Attr& a : op.attrs) {
    if (a.type == AttrType::kDtype && !bound.count(a.name)) {
      f.error(a.where, "dtype attribute '" + a.name + "' binds no type variable; declare one under 'types' (Q: {attr: " +
                           a.name + "}) and give it to the tensors whose dtype it chooses");
      ok = false;
    }
  }
  return ok;
}

}  // namespace

std::optional<Op> read_op_spec(const std::string& path, const std::string& display_path,
                               Diagnostics& diags) {
  SpecFile f(display_path, diags);
  std::optional<YAML::Node> loaded = f.load(path);
  if (!loaded) return std::nullopt;
  const YAML::Node& root = *loaded;

  Op op;
  op.spec_path = display_path;
  op.platforms = {Platform::kCuda, Platform::kCpu};
  op.api_versions = {4};
  bool ok = true;

  std::set<std::string> refused_attrs;  // declared under 'attrs', but not read
  const auto top = f.entries(
      root, "the spec",
      {"opgen", "name", "doc", "types", "inputs", "outputs", "attrs", "workspace", "constraints", "split", "platforms",
       "xla", "backward", "differentiable", "state"});
  f.require(root, "the spec", {"opgen", "name", "inputs", "outputs"});
  if (!check_format_version(f, root)) ok = false;
  // Type variables first: tensors refer to them wherever `types:` stands.
  for (const auto& [key, value] : top) {
    if (key != "types") continue;
    ok = read_type_vars(f, value, op.type_vars) && ok;
  }
  for (const auto& [key, value] : top) {
    if (key == "name") {
      std::optional<std::string> name = f.snake_name(value, "op name");
      if (!name) {
        ok = false;
        continue;
      }
      op.name = *name;
      const std::string stem = std::filesystem::path(display_path).stem().string();
      if (stem != op.name) {
        f.error(f.at(value), "op name '" + op.name + "' does not match the file name '" +
                                 std::filesystem::path(display_path).filename().string() +
                                 "' (an op's spec is <name>.yaml)");
        ok = false;
      }
    } else if (key == "doc") {
      std::optional<std::string> s = f.string(value, "'doc'");
      if (s) op.doc = *s;
      else ok = false;
    } else if (key == "inputs") {
      ok = read_tensors(f, value, "inputs", "input", op.type_vars, op.inputs) && ok;
    } else if (key == "outputs") {
      ok = read_tensors(f, value, "outputs", "output", op.type_vars, op.outputs) && ok;
    } else if (key == "workspace") {
      ok = read_tensors(f, value, "workspace", "workspace", op.type_vars, op.workspaces) && ok;
    } else if (key == "attrs") {
      if (!f.expect_map(value, "'attrs'")) {
        ok = false;
        continue;
      }
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!it->first.IsScalar()) {
          f.error(f.at(it->first), "attribute names must be plain names");
          ok = false;
          continue;
        }
        std::optional<Attr> a = read_attr(f, it->first.Scalar(), it->second, f.at(it->first));
        if (a) {
          op.attrs.push_back(*a);
        } else {
          refused_attrs.insert(it->first.Scalar());
          ok = false;
        }
      }
    } else if (key == "constraints") {
      read_constraints(f, value, op, ok);
    } else if (key == "split") {
      read_splits(f, value, op, ok);
    } else if (key == "platforms") {
      read_platforms(f, value, op, ok);
    } else if (key == "xla") {
      read_xla(f, value, op, ok);
    } else if (key == "backward") {
      op.backward = read_backward(f, value);
      ok = op.backward.has_value() && ok;
    } else if (key == "state") {
      read_state(f, value, op, ok);
    } else if (key == "differentiable") {
      std::optional<bool> b = f.boolean(value, "'differentiable'");
      if (b) op.differentiable = *b;
      else ok = false;
    }
  }
  ok = bind_dtype_attrs(f, op, refused_attrs) && ok;
  // Every combination is compiled into every binding: keep their number sane
  // (a derived variable adds none, a chosen one the dtypes it reaches).
  if (root["types"] && ok) {
    const size_t combinations = op.instantiations().size();
    if (combinations > kMaxInstantiations) {
      f.error(f.at(root["types"]), "the type variables give " + std::to_string(combinations) +
                                       " dtype combinations; at most " + std::to_string(kMaxInstantiations) +
                                       " are compiled into each binding");
      ok = false;
    }
  }
  // `differentiable: false` says the outputs are constants of the inputs; a
  // backward op would say how they vary with them.
  if (!op.differentiable && root["backward"]) {
    f.error(f.at(root["differentiable"]), "the spec declares 'differentiable: false' and a 'backward' op: an op "
                                          "that is not differentiable has no gradients; drop one of them");
    ok = false;
  }
  op.xla_where = root["xla"] ? f.at(root["xla"]) : f.at(root);
  if (!ok || op.name.empty() || op.inputs.empty() || op.outputs.empty()) return std::nullopt;
  return op;
}

std::optional<Package> read_package_spec(const std::string& path, const std::string& display_path,
                                         Diagnostics& diags) {
  SpecFile f(display_path, diags);
  std::optional<YAML::Node> loaded = f.load(path);
  if (!loaded) return std::nullopt;
  const YAML::Node& root = *loaded;
  Package pkg;
  pkg.spec_path = display_path;
  bool ok = true;
  const int errors_before = diags.error_count();
  std::set<std::string> refused_attrs;  // declared under 'attrs', but not read
  const auto top = f.entries(root, "the package settings", {"opgen", "package"});
  f.require(root, "the package settings", {"opgen", "package"});
  if (!check_format_version(f, root)) ok = false;
  for (const auto& [key, value] : top) {
    if (key != "package" || !f.expect_map(value, "'package'")) {
      ok = ok && key != "package";
      continue;
    }
    const auto fields = f.entries(value, "'package'", {"name", "torch_namespace"});
    f.require(value, "'package'", {"name", "torch_namespace"});
    for (const auto& [k, v] : fields) {
      std::optional<std::string> s = f.snake_name(v, k == "name" ? "package name" : "torch namespace");
      if (!s) {
        ok = false;
      } else if (k == "name") {
        // Importable beside everything else: a package named json would hide
        // the standard json module from every import on the path.
        if (const std::string hidden = shadowed_module(*s); !hidden.empty()) {
          f.error(f.at(v), "package name '" + *s + "' would hide " + hidden + " from every import; choose another name");
          ok = false;
        }
        pkg.name = *s;
      } else {
        if (is_reserved_torch_namespace(*s)) {
          f.error(f.at(v), "torch namespace '" + *s + "' is PyTorch's own; choose another name");
          ok = false;
        }
        pkg.torch_namespace = *s;
      }
    }
  }
  if (!ok || pkg.name.empty() || pkg.torch_namespace.empty()) return std::nullopt;
  if (diags.error_count() > errors_before) return std::nullopt;
  return pkg;
}

}  // namespace opgen::gen
