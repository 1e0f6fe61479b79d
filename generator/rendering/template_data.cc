#include "rendering/template_data.h"

#include <algorithm>
#include <utility>

#include "model/names.h"
#include "reading/shape_expr.h"

namespace opgen::gen {
namespace {

json text_or_none(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json value(const std::optional<AttrValue>& v) {
  if (!v) return nullptr;
  return std::visit([](const auto& x) { return json(x); }, *v);
}

// {kind: int, value}, {kind: symbol, symbol}, or {kind: + - * / // %, lhs, rhs,
// symbolic: whether a symbol occurs below}.
json expr_tree(const Expr& e, bool* symbolic) {
  json node;
  if (e.kind == Expr::Kind::kInt) {
    node["kind"] = "int";
    node["value"] = e.value;
    *symbolic = false;
    return node;
  }
  if (e.kind == Expr::Kind::kSymbol) {
    node["kind"] = "symbol";
    node["symbol"] = e.symbol;
    *symbolic = true;
    return node;
  }
  bool left = false, right = false;
  node["kind"] = e.kind == Expr::Kind::kAdd   ? "+"
                 : e.kind == Expr::Kind::kSub ? "-"
                 : e.kind == Expr::Kind::kMul ? "*"
                 : e.kind == Expr::Kind::kDiv ? "/"
                 : e.kind == Expr::Kind::kFloorDiv ? "//"
                                              : "%";
  node["lhs"] = expr_tree(*e.lhs, &left);
  node["rhs"] = expr_tree(*e.rhs, &right);
  *symbolic = left || right;
  node["symbolic"] = *symbolic;
  return node;
}

const char* platform_name(Platform p) { return p == Platform::kCuda ? "cuda" : "cpu"; }

json tensor_facts(const Tensor& t) {
  json out;
  out["name"] = t.name;
  out["doc"] = t.doc;
  out["dtype"] = t.type_var.empty() ? json(info(t.dtype).name) : json(nullptr);
  out["type_var"] = text_or_none(t.type_var);
  out["batch"] = t.batch;
  out["optional"] = t.optional;
  out["layout"] = layout_names()[static_cast<size_t>(t.layout)];
  bool symbolic = false;
  out["values_min"] = t.values_min ? expr_tree(*t.values_min, &symbolic) : json(nullptr);
  out["values_max"] = t.values_max ? expr_tree(*t.values_max, &symbolic) : json(nullptr);
  out["values_min_exclusive"] = t.values_min_exclusive;
  out["values_max_exclusive"] = t.values_max_exclusive;
  out["values_range_text"] = values_range_text(t);
  out["values_unique"] = t.values_unique;
  out["alias"] = text_or_none(t.alias);
  out["unordered"] = t.unordered;
  out["on_request"] = t.on_request();
  // The names the generated code derives from the tensor's (names.h), where it has them.
  out["strides_name"] = t.layout == Layout::kContiguous ? json(nullptr) : json(strides_name(t.name));
  out["in_range_name"] = t.values_min || t.values_max ? json(in_range_name(t.name)) : json(nullptr);
  out["dims_name"] = dims_name(t.name);
  out["request_param"] = nullptr;  // an output's on request: set by op_facts
  json platforms = json::array();
  for (Platform p : t.platforms) platforms.push_back(platform_name(p));
  out["platforms"] = std::move(platforms);
  json dims = json::array();
  for (const Dim& d : t.shape) {
    json dim;
    dim["text"] = d.text;
    dim["size"] = d.fixed ? json(*d.fixed) : json(nullptr);
    dim["symbol"] = text_or_none(d.symbol);
    dim["kind"] = d.fixed ? "fixed" : d.expr ? "expr" : "symbol";
    if (d.expr) {
      bool symbolic = false;
      dim["tree"] = expr_tree(*d.expr, &symbolic);
    }
    dims.push_back(std::move(dim));
  }
  out["dims"] = std::move(dims);
  return out;
}

json attr_facts(const Attr& a) {
  json out;
  out["name"] = a.name;
  out["doc"] = a.doc;
  out["type"] = info(a.type).name;
  out["element_type"] = info(element_type(a.type)).name;
  out["array"] = is_array(a.type);
  out["enum_type"] = a.type == AttrType::kEnum ? enum_type_name(a.name) : std::string();
  out["has_default"] = a.default_value.has_value();
  out["default"] = value(a.default_value);
  out["min"] = value(a.min);
  out["max"] = value(a.max);
  // As the runtime's messages spell them (number_text), for the Python
  // description and the docs.
  out["min_text"] = a.min ? json(number_text(*a.min)) : json(nullptr);
  out["max_text"] = a.max ? json(number_text(*a.max)) : json(nullptr);
  out["min_exclusive"] = a.min_exclusive;
  out["max_exclusive"] = a.max_exclusive;
  out["range_text"] = range_text(a);
  out["values"] = a.values;
  // An enum's C++ enumerators (every attribute has the key: the facts of a kind have one set of keys).
  std::vector<std::string> enumerators;
  if (a.type == AttrType::kEnum) {
    for (const std::string& v : a.values) enumerators.push_back(enumerator_name(v));
  }
  out["enumerators"] = enumerators;
  out["size"] = a.size ? json(*a.size) : json(nullptr);
  out["unique"] = a.unique;
  return out;
}

const char* kind_name(OpaqueField::Kind k) {
  switch (k) {
    case OpaqueField::Kind::kDtype: return "dtype";
    case OpaqueField::Kind::kPresent: return "present";
    case OpaqueField::Kind::kRequested: return "requested";
    case OpaqueField::Kind::kBatch: return "batch";
    case OpaqueField::Kind::kSymbol: return "symbol";
    case OpaqueField::Kind::kEnum: return "enum";
    case OpaqueField::Kind::kArray: return "array";
    case OpaqueField::Kind::kAttr: break;
  }
  return "attr";
}

json opaque_facts(const OpaqueLayout& layout) {
  json fields = json::array();
  for (const OpaqueField& f : layout.fields) {
    json d;
    d["name"] = f.name;
    d["kind"] = kind_name(f.kind);
    d["code"] = f.struct_code;
    if (f.kind == OpaqueField::Kind::kDtype) d["type_var"] = f.type_var;
    fields.push_back(std::move(d));
  }
  json out;
  out["fields"] = std::move(fields);
  out["fingerprint"] = layout.fingerprint;
  return out;
}


}  // namespace

json package_facts(const Package& package) {
  json out;
  out["name"] = package.name;
  out["torch_namespace"] = package.torch_namespace;
  out["spec_path"] = package.spec_path;
  return out;
}

json dtype_facts() {
  json out = json::array();
  for (const DTypeInfo& i : all_dtypes()) {
    json d;
    d["code"] = static_cast<int>(out.size());  // its index in the table: the code descriptors carry
    d["name"] = i.name;
    d["enum"] = i.enumerator;
    d["cpp"] = i.cpp;
    d["python"] = i.python;
    d["size"] = i.size;
    out.push_back(std::move(d));
  }
  return out;
}

json attr_type_facts() {
  json out;
  for (const AttrTypeInfo& i : all_attr_types()) {
    json d;
    d["name"] = i.name;
    d["cpp"] = i.cpp;
    d["numpy"] = i.numpy;
    d["torch_schema"] = i.torch_schema;
    d["py_type"] = i.py_type;
    d["size"] = i.size;
    out[i.name] = std::move(d);
  }
  return out;
}

// {text, operator, lhs, rhs (None for 'in'), set, names: each name it uses, once, in order}.
json constraint_facts(const Constraint& c) {
  json out;
  bool symbolic = false;
  out["text"] = c.text;
  out["operator"] = constraint_operator(c.kind);
  out["lhs"] = expr_tree(*c.lhs, &symbolic);
  out["rhs"] = c.rhs ? expr_tree(*c.rhs, &symbolic) : json(nullptr);
  out["set"] = c.set;
  std::vector<std::string> names, once;
  expr_symbols(*c.lhs, names);
  if (c.rhs) expr_symbols(*c.rhs, names);
  for (const std::string& n : names) {
    if (std::find(once.begin(), once.end(), n) == once.end()) once.push_back(n);
  }
  out["names"] = std::move(once);
  return out;
}

json op_facts(const Op& op, const std::string& package) {
  json out;
  out["name"] = op.name;
  out["torch_lowered"] = op.torch_lowered();
  out["torch_kernel_name"] = torch_kernel_name(op.name, op.torch_lowered());
  // Each custom call handler: [{platform, api_version, target, symbol}].
  json targets = json::array();
  for (const auto& [p, v] : op.handlers()) {
    targets.push_back({{"platform", platform_name(p)},
                       {"api_version", v},
                       {"target", xla_target_name(package, op.name, v)},
                       {"symbol", xla_handler_symbol(package, op.name, platform_name(p), v)}});
  }
  out["targets"] = std::move(targets);
  // [[api_version, its target]] for each of the spec's api_versions.
  json xla_targets = json::array();
  for (int v : op.api_versions) xla_targets.push_back(json::array({v, xla_target_name(package, op.name, v)}));
  out["xla_targets"] = std::move(xla_targets);
  out["doc"] = op.doc;
  out["spec_path"] = op.spec_path;
  json inputs = json::array(), outputs = json::array(), attrs = json::array(), symbols = json::array(),
       type_vars = json::array(), platforms = json::array();
  for (const Tensor& t : op.inputs) inputs.push_back(tensor_facts(t));
  for (const Tensor& t : op.outputs) {
    outputs.push_back(tensor_facts(t));
    if (t.on_request()) outputs.back()["request_param"] = request_param(t.name);
  }
  json workspaces = json::array();
  for (const Tensor& t : op.workspaces) workspaces.push_back(tensor_facts(t));
  for (const Attr& a : op.attrs) attrs.push_back(attr_facts(a));
  for (const SymbolBinding& s : op.symbols) {
    json d;
    d["name"] = s.symbol;
    d["input"] = s.input;
    d["axis"] = s.axis;
    symbols.push_back(std::move(d));
  }
  for (const TypeVar& v : op.type_vars) {
    json d;
    d["name"] = v.name;
    json dtypes = json::array();
    for (DType t : v.dtypes) dtypes.push_back(info(t).name);
    d["dtypes"] = std::move(dtypes);
    // Derived: the variable it follows and its dtype for each of that one's.
    d["from"] = text_or_none(v.from);
    json map = json::array();
    for (DType t : v.map) map.push_back(info(t).name);
    d["map"] = std::move(map);
    d["attr"] = text_or_none(v.attr);  // bound by this dtype attribute, or chosen by this enum attribute
    // Chosen: for each of the enum's values in order, [value, a dtype or null, a variable or null].
    json choices = json::array();
    for (const TypeVar::Choice& c : v.choices) {
      choices.push_back({c.value, c.dtype ? json(info(*c.dtype).name) : json(nullptr), text_or_none(c.var)});
    }
    d["choices"] = std::move(choices);
    type_vars.push_back(std::move(d));
  }
  // Every instantiation, in the order the bindings number them: each a dtype for each variable.
  json instantiations = json::array();
  for (const auto& assignment : op.instantiations()) {
    json a = json::array();
    for (const TypeVar& v : op.type_vars) a.push_back(info(assignment.at(v.name)).name);
    instantiations.push_back(std::move(a));
  }
  out["instantiations"] = std::move(instantiations);
  for (Platform p : op.platforms) platforms.push_back(platform_name(p));
  out["inputs"] = std::move(inputs);
  out["outputs"] = std::move(outputs);
  out["workspaces"] = std::move(workspaces);
  out["attrs"] = std::move(attrs);
  out["symbols"] = symbols;  // in binding order
  json constraints = json::array();
  for (const Constraint& c : op.constraints) constraints.push_back(constraint_facts(c));
  out["constraints"] = std::move(constraints);
  out["type_vars"] = std::move(type_vars);
  out["platforms"] = std::move(platforms);
  out["api_versions"] = op.api_versions;
  out["command_buffer_compatible"] = op.cmd_buffer_compatible();
  out["vmap_method"] = op.vmap_method;
  out["batch_partitionable"] = op.batch_partitioned();
  json splits = json::array();
  for (const Split& s : op.splits) {
    json d;
    d["name"] = s.name;
    d["symbols"] = s.symbols;
    splits.push_back(std::move(d));
  }
  out["splits"] = std::move(splits);
  out["opaque"] = opaque_facts(op.opaque_layout(package));
  out["differentiable"] = op.differentiable;
  if (op.state) {
    json platforms_of_state = json::array();
    for (Platform p : op.state->platforms) platforms_of_state.push_back(platform_name(p));
    // Its C++ names on each platform that makes it, by platform.
    json names = json::object();
    for (Platform p : op.state->platforms) {
      names[platform_name(p)] = {{"platform", platform_name(p)},
                                 {"type", state_type_name(platform_name(p))},
                                 {"make", make_state_name(platform_name(p))},
                                 {"field", state_field_name(platform_name(p))}};
    }
    out["state"] = {{"doc", op.state->doc}, {"platforms", std::move(platforms_of_state)}, {"names", std::move(names)}};
  } else {
    out["state"] = nullptr;
  }
  if (op.backward) {
    // {op, inputs: [[kind, name]], gradients: [[backward output, forward input]]}
    json b;
    b["op"] = op.backward->op;
    json args = json::array(), gradients = json::array();
    for (const BackwardArg& a : op.backward->inputs) {
      const char* kind = a.kind == BackwardArg::Kind::kInput    ? "input"
                         : a.kind == BackwardArg::Kind::kOutput ? "output"
                                                                : "cotangent";
      args.push_back(json::array({kind, a.name}));
    }
    for (const auto& [out_name, in_name] : op.backward->gradients) gradients.push_back(json::array({out_name, in_name}));
    b["inputs"] = std::move(args);
    b["gradients"] = std::move(gradients);
    out["backward"] = std::move(b);
  } else {
    out["backward"] = nullptr;
  }
  return out;
}

}  // namespace opgen::gen
