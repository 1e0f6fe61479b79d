#include "resolving/resolve.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/names.h"
#include "reading/shape_expr.h"
#include "resolving/resolve_backward.h"

namespace opgen::gen {
namespace {

// Binds every shape symbol to its first required input dimension, gives each
// aliasing output its input's dtype and shape, and checks that `...` in an
// output has an input to take its batch dimensions from, and that every type
// variable is bound by an input. (What an output's dimensions may name is
// resolve_sizes'.)
bool resolve_symbols(Diagnostics& diags, Op& op) {
  bool ok = true;
  std::map<std::string, bool> bound;
  bool input_batch = false;
  // Optional inputs come last, so that the frameworks' argument lists (and
  // the custom call's operands) are the required inputs, then those given.
  for (size_t i = 1; i < op.inputs.size(); ++i) {
    if (op.inputs[i - 1].optional && !op.inputs[i].optional) {
      diags.error(op.inputs[i].where, "required input '" + op.inputs[i].name + "' follows optional input '" +
                                          op.inputs[i - 1].name + "'; list the optional inputs last");
      ok = false;
    }
  }
  if (std::all_of(op.inputs.begin(), op.inputs.end(), [](const Tensor& t) { return t.optional; })) {
    diags.error(op.inputs[0].where, "every input is optional; at least the first must be required");
    return false;
  }
  if (!ok) return false;  // the ordering error above says what to fix
  // The presence mask is a u32 in legacy descriptors.
  if (op.optional_inputs() > 32) {
    diags.error(op.inputs[op.required_inputs() + 32].where, "an op may have at most 32 optional inputs");
    return false;
  }
  // The request mask is a u32 in legacy descriptors too.
  if (op.requested_outputs() > 32) {
    size_t seen = 0;
    for (const Tensor& o : op.outputs) {
      if (o.on_request() && ++seen > 32) {
        diags.error(o.where, "an op may have at most 32 optional outputs");
        return false;
      }
    }
  }
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const Tensor& t = op.inputs[i];
    if (t.optional) continue;
    input_batch = input_batch || t.batch;
    for (size_t axis = 0; axis < t.shape.size(); ++axis) {
      const Dim& d = t.shape[axis];
      if (d.symbol.empty() || bound.count(d.symbol)) continue;
      bound[d.symbol] = true;
      op.symbols.push_back({d.symbol, static_cast<int>(i), static_cast<int>(axis)});
    }
  }
  // A symbol that only optional inputs name is bound by the first of them
  // that a call gives (0 when it gives none): only what leaves with them (an
  // output that updates one in place, a constraint, checked when given) may use it.
  std::map<std::string, std::string> optional_only;  // symbol -> the optional input that binds it
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const Tensor& t = op.inputs[i];
    if (!t.optional) continue;
    if (t.batch && !input_batch) {
      diags.error(t.where, "optional input '" + t.name + "' has batch dimensions ('...') but no required input has any to match");
      ok = false;
    }
    for (size_t axis = 0; axis < t.shape.size(); ++axis) {
      const Dim& d = t.shape[axis];
      if (d.symbol.empty() || bound.count(d.symbol) || optional_only.count(d.symbol)) continue;
      optional_only[d.symbol] = t.name;
      op.symbols.push_back({d.symbol, static_cast<int>(i), static_cast<int>(axis)});
    }
  }
  std::map<std::string, std::string> aliased;  // input -> the output that aliases it
  for (Tensor& t : op.outputs) {
    if (t.alias.empty()) continue;
    const auto input = std::find_if(op.inputs.begin(), op.inputs.end(),
                                    [&](const Tensor& i) { return i.name == t.alias; });
    if (input == op.inputs.end()) {
      std::vector<std::string> names;
      for (const Tensor& i : op.inputs) names.push_back(i.name);
      const std::string fix = closest_match(t.alias, names);
      diags.error(t.where, "output '" + t.name + "' aliases '" + t.alias + "', which is not an input" +
                               (fix.empty() ? std::string() : "; did you mean '" + fix + "'?"));
      ok = false;
      continue;
    }
    if (!aliased.emplace(t.alias, t.name).second) {
      diags.error(t.where, "output '" + t.name + "' aliases input '" + t.alias + "', which output '" + aliased[t.alias] + "' already aliases");
      ok = false;
      continue;
    }
    t.dtype = input->dtype;
    t.type_var = input->type_var;
    t.batch = input->batch;
    t.shape = input->shape;
    t.optional = input->optional;  // an output left out with its input
  }
  if (ok && op.requested_outputs() > 0 &&
      std::all_of(op.outputs.begin(), op.outputs.end(), [](const Tensor& t) { return t.optional; })) {
    diags.error(op.outputs.front().where, "every output is optional (asked for by the caller, or left out with the "
                                          "optional input it updates); a call that asks for none would have no result "
                                          "(make one output required)");
    ok = false;
  } else if (ok && std::all_of(op.outputs.begin(), op.outputs.end(), [](const Tensor& t) { return t.optional; })) {
    diags.error(op.outputs.front().where, "every output updates an optional input; a call that omits them all would "
                                          "have no result (make one input required, or add an output)");
    ok = false;
  }
  for (const Tensor& t : op.outputs) {
    if (t.batch && !input_batch) {
      diags.error(t.where, "output '" + t.name + "' has batch dimensions ('...') but no input has any to take them from");
      ok = false;
    }
  }
  for (const TypeVar& v : op.type_vars) {
    if (v.derived() || !v.attr.empty()) continue;  // bound by another variable or an attribute
    auto uses = [&](const std::vector<Tensor>& ts) {
      return std::any_of(ts.begin(), ts.end(), [&](const Tensor& t) { return t.type_var == v.name; });
    };
    const std::vector<Tensor> required(op.inputs.begin(), op.inputs.begin() + op.required_inputs());
    if (!uses(required)) {
      diags.error(v.where, "type variable '" + v.name + "' is not the dtype of any " +
                               (uses(op.inputs) ? "required " : "") + "input, so a call cannot bind it");
      ok = false;
    }
  }
  return ok;
}

// Every name lands in one C++ struct and one Python signature.
bool check_unique_names(Diagnostics& diags, const Op& op) {
  bool ok = true;
  std::map<std::string, std::pair<std::string, Location>> owner;
  auto claim = [&](const std::string& name, const std::string& role, const Location& where) {
    auto [it, inserted] = owner.emplace(name, std::make_pair(role, where));
    if (!inserted) {
      const Location& first = it->second.second;
      diags.error(where, "the name '" + name + "' of this " + role + " is already used by the " +
                             it->second.first + " at line " + std::to_string(first.line) +
                             "; inputs, outputs, attributes, workspaces, shape symbols and type variables share one namespace");
      ok = false;
    }
  };
  for (const Tensor& t : op.inputs) claim(t.name, "input", t.where);
  for (const Tensor& t : op.outputs) claim(t.name, "output", t.where);
  for (const Attr& a : op.attrs) claim(a.name, "attribute", a.where);
  for (const Tensor& w : op.workspaces) claim(w.name, "workspace", w.where);
  for (const SymbolBinding& s : op.symbols) {
    const Dim& d = op.inputs[s.input].shape[s.axis];
    claim(s.symbol, "shape symbol", d.where);
  }
  for (const TypeVar& v : op.type_vars) claim(v.name, "type variable", v.where);
  // Names the kernel interface derives from an input (its strides, its
  // range check), an output or a workspace (its dimensions): they live in
  // Args beside the names above.
  for (const Tensor& t : op.inputs) {
    if (t.layout != Layout::kContiguous) claim(strides_name(t.name), "input's strides (Args::" + strides_name(t.name) + ")", t.where);
    if (t.values_min || t.values_max) claim(in_range_name(t.name), "input's range check (Args::" + in_range_name(t.name) + ")", t.where);
  }
  for (const Tensor& t : op.outputs) {
    if (t.alias.empty() && (!t.shape.empty() || t.batch)) claim(dims_name(t.name), "output's dimensions (Args::" + dims_name(t.name) + ")", t.where);
  }
  for (const Tensor& w : op.workspaces) {
    if (!w.shape.empty() || w.batch) claim(dims_name(w.name), "workspace's dimensions (Args::" + dims_name(w.name) + ")", w.where);
  }
  // The keyword that asks for an output on request is a parameter of the
  // wrappers and of the torch schema, beside the inputs and attributes.
  for (const Tensor& t : op.outputs) {
    if (t.on_request()) claim(request_param(t.name), "optional output's keyword (" + request_param(t.name) + ")", t.where);
  }
  // One with_<name> dispatch helper per `<name> in [...]` constraint.
  std::map<std::string, int> dispatched;
  for (const Constraint& c : op.constraints) {
    if (c.kind != Constraint::Kind::kIn || c.lhs->kind != Expr::Kind::kSymbol) continue;
    if (auto [it, inserted] = dispatched.emplace(c.lhs->symbol, c.where.line); !inserted) {
      diags.error(c.where, "'" + c.lhs->symbol + "' is restricted with 'in' twice (first at line " + std::to_string(it->second) +
                               "); give it one list of values");
      ok = false;
    }
  }
  // Each enum attribute names a C++ type in the op's namespace; it must not
  // meet another such name, a symbol or type variable (C++ names too), or a
  // type the generated code uses there.
  std::map<std::string, std::string> cpp_types;
  for (const char* taken : {"Args", "Descriptor", "Instantiations", "Tensor", "Span", "Status"}) cpp_types[taken] = "the generated code";
  for (const SymbolBinding& s : op.symbols) cpp_types.emplace(s.symbol, "shape symbol '" + s.symbol + "'");
  for (const TypeVar& v : op.type_vars) cpp_types.emplace(v.name, "type variable '" + v.name + "'");
  for (const Attr& a : op.attrs) {
    if (a.type != AttrType::kEnum) continue;
    const std::string type = enum_type_name(a.name);
    auto [it, inserted] = cpp_types.emplace(type, "enum attribute '" + a.name + "'");
    if (!inserted) {
      diags.error(a.where, "enum attribute '" + a.name + "' names its C++ type '" + type + "', which " + it->second +
                               " already uses; rename the attribute");
      ok = false;
    }
  }
  // torch.compile functionalizes an op that updates an input in place
  // through a helper whose own parameter is named `mode`.
  if (std::any_of(op.outputs.begin(), op.outputs.end(), [](const Tensor& t) { return !t.alias.empty(); })) {
    auto refuse_mode = [&](const std::string& name, const Location& where, const std::string& kind) {
      if (name != "mode") return;
      diags.error(where, "an op with an in-place output cannot have an " + kind + " named 'mode': torch.compile's "
                         "functionalization passes its own 'mode' argument; rename the " + kind);
      ok = false;
    };
    for (const Attr& a : op.attrs) refuse_mode(a.name, a.where, "attribute");
    for (const Tensor& t : op.inputs) refuse_mode(t.name, t.where, "input");
  }
  if (op.has_batch()) {
    for (const Tensor& t : op.inputs) {
      if (t.batch) {
        claim(kBatchField, "batch count (the '...' of input '" + t.name + "')", t.where);
        break;
      }
    }
  }
  return ok;
}

// Each name `what` uses is a shape symbol of a required input or an integer
// attribute (i32 or i64), so that every call has its value.
bool check_names(Diagnostics& diags, const Op& op, const std::vector<std::string>& names, const Location& where,
                 const std::string& what, bool optional_ok = false) {
  for (const std::string& name : names) {
    const auto symbol = std::find_if(op.symbols.begin(), op.symbols.end(),
                                     [&](const SymbolBinding& s) { return s.symbol == name; });
    const auto attr = std::find_if(op.attrs.begin(), op.attrs.end(), [&](const Attr& a) { return a.name == name; });
    if (symbol != op.symbols.end() && op.inputs[symbol->input].optional && !optional_ok) {
      diags.error(where, what + " names '" + name + "', which only optional input '" + op.inputs[symbol->input].name +
                             "' gives (a call may omit it)");
      return false;
    }
    if (symbol != op.symbols.end()) continue;
    if (attr != op.attrs.end() && (attr->type == AttrType::kI32 || attr->type == AttrType::kI64)) continue;
    diags.error(where, what + " names '" + name + "', which is " +
                           (attr != op.attrs.end() ? std::string("a ") + info(attr->type).name +
                                                         " attribute (only integer attributes may appear there)"
                                                   : "neither a shape symbol of a required input nor an attribute"));
    return false;
  }
  return true;
}

// The names in the dimensions of `t`, an output or a workspace: what every
// call has, a shape symbol of a required input or an integer attribute
// (`[N, topk]`, `[N * k + E * (b - 1)]`).
bool check_shape_names(Diagnostics& diags, const Op& op, const Tensor& t, const std::string& role) {
  bool ok = true;
  for (const Dim& d : t.shape) {
    std::vector<std::string> names;
    if (d.expr) expr_symbols(*d.expr, names);
    else if (!d.symbol.empty()) names.push_back(d.symbol);
    ok = check_names(diags, op, names, d.where, "the shape of " + role + " '" + t.name + "'") && ok;
  }
  return ok;
}

// Output and workspace sizes come from what every call has; a workspace's
// `...` stands for the batch of the inputs. (An output that updates an input
// in place has that input's shape, which may use a symbol only an optional
// input gives: it is left out with that input.)
bool resolve_sizes(Diagnostics& diags, const Op& op) {
  bool ok = true;
  for (const Tensor& t : op.outputs) {
    if (t.alias.empty()) ok = check_shape_names(diags, op, t, "output") && ok;
  }
  const bool input_batch = std::any_of(op.inputs.begin(), op.inputs.end(), [](const Tensor& t) { return t.batch; });
  for (const Tensor& w : op.workspaces) {
    if (w.batch && !input_batch) {
      diags.error(w.where, "workspace '" + w.name + "' has batch dimensions ('...') but no input has any to take them from");
      ok = false;
    }
    ok = check_shape_names(diags, op, w, "workspace") && ok;
  }
  return ok;
}

// A workspace is allocated, and the op's state made, on the platforms each
// names (a cuBLASLt workspace and handle on CUDA alone), by default on every
// platform of the op.
bool resolve_platform_lists(Diagnostics& diags, Op& op) {
  bool ok = true;
  for (Tensor& w : op.workspaces) {
    if (w.platforms.empty()) {
      w.platforms = op.platforms;
      continue;
    }
    for (Platform p : w.platforms) {
      if (!op.has_platform(p)) {
        diags.error(w.platforms_where, std::string("workspace '") + w.name + "' names platform '" +
                                           (p == Platform::kCuda ? "cuda" : "cpu") +
                                           "', which is not among the op's 'platforms'");
        ok = false;
      }
    }
  }
  if (op.state && op.state->platforms.empty()) {
    op.state->platforms = op.platforms;
  } else if (op.state) {
    for (Platform p : op.state->platforms) {
      if (!op.has_platform(p)) {
        diags.error(op.state->platforms_where, std::string("'state' names platform '") +
                                                   (p == Platform::kCuda ? "cuda" : "cpu") +
                                                   "', which is not among the op's 'platforms'");
        ok = false;
      }
    }
  }
  return ok;
}

bool resolve_constraints(Diagnostics& diags, const Op& op) {
  bool ok = true;
  for (const Constraint& c : op.constraints) {
    std::vector<std::string> names;
    expr_symbols(*c.lhs, names);
    if (c.rhs) expr_symbols(*c.rhs, names);
    // Checked only when the optional inputs it names are given.
    ok = check_names(diags, op, names, c.where, "constraint '" + c.text + "'", true) && ok;
  }
  return ok;
}

// An input with a value range is of integer dtypes, and its bounds name
// only what every call has.
bool resolve_value_ranges(Diagnostics& diags, const Op& op) {
  bool ok = true;
  for (const Tensor& t : op.inputs) {
    if (!t.values_min && !t.values_max) continue;
    const std::string what = "the value range of input '" + t.name + "'";
    if (!t.type_var.empty()) {
      const auto v = std::find_if(op.type_vars.begin(), op.type_vars.end(),
                                  [&](const TypeVar& tv) { return tv.name == t.type_var; });
      for (DType d : v->dtypes) {
        if (d == DType::kI32 || d == DType::kI64 || d == DType::kU8) continue;
        diags.error(t.where, "input '" + t.name + "' has a value range, but its type variable " + t.type_var +
                                 " takes " + info(d).name + ", which is not an integer type");
        ok = false;
        break;
      }
    }
    for (const auto& bound : {t.values_min, t.values_max}) {
      if (!bound) continue;
      std::vector<std::string> names;
      expr_symbols(*bound, names);
      ok = check_names(diags, op, names, t.where, what) && ok;
    }
  }
  return ok;
}

}  // namespace

// Each symbol of a split is a size an input's shape binds, in one split at most.
bool resolve_splits(Diagnostics& diags, const Op& op) {
  std::set<std::string> seen;
  bool ok = true;
  for (const Split& split : op.splits) {
    if (split.symbols.empty()) {
      diags.error(split.where, "split '" + split.name + "' names no shape symbol");
      ok = false;
    }
    for (const std::string& s : split.symbols) {
      const bool bound = std::any_of(op.symbols.begin(), op.symbols.end(),
                                     [&](const SymbolBinding& b) { return b.symbol == s; });
      if (!bound) {
        diags.error(split.where, "split '" + split.name + "': '" + s + "' is not a shape symbol of an input");
        ok = false;
      } else if (!seen.insert(s).second) {
        diags.error(split.where, "split '" + split.name + "': '" + s + "' is in another split too");
        ok = false;
      }
    }
  }
  // A device's part of a split dimension is the dimension cut: a symbol of a
  // split stands whole in each shape, and once in it (one mesh axis cuts one
  // dimension of a tensor).
  auto check_shape = [&](const Tensor& t, const char* role) {
    std::map<std::string, int> uses;
    for (const Dim& d : t.shape) {
      if (!d.symbol.empty() && seen.count(d.symbol)) ++uses[d.symbol];
      if (!d.expr) continue;
      std::vector<std::string> in_expr;
      expr_symbols(*d.expr, in_expr);
      for (const std::string& s : in_expr) {
        if (!seen.count(s)) continue;
        diags.error(d.where, std::string(role) + " '" + t.name + "' uses split symbol '" + s + "' in the expression '" +
                                 d.text + "'; a split's symbols stand only as whole dimensions");
        ok = false;
      }
    }
    for (const auto& [s, n] : uses) {
      if (n < 2) continue;
      diags.error(t.where, std::string(role) + " '" + t.name + "' has split symbol '" + s +
                               "' twice; a split cuts one dimension of each tensor");
      ok = false;
    }
  };
  for (const Tensor& t : op.inputs) check_shape(t, "input");
  for (const Tensor& t : op.outputs) check_shape(t, "output");
  for (const Tensor& t : op.workspaces) check_shape(t, "workspace");
  if (!ok) return false;  // (an output dimension 'D/2' is no cut of D; that error says so)
  // What a device computes from its part must be its part of the result.
  // Constraints and workspaces may name a split's symbols: a part is cut
  // only where the constraints hold on it, and each call sizes its own
  // workspaces. Two uses may not:
  for (const Split& split : op.splits) {
    const std::set<std::string> cut(split.symbols.begin(), split.symbols.end());
    // - an index's value range: the values still index the whole dimension,
    //   of which a device holds only its part;
    for (const Tensor& t : op.inputs) {
      for (const auto& bound : {t.values_min, t.values_max}) {
        if (!bound) continue;
        std::vector<std::string> names;
        expr_symbols(*bound, names);
        const auto s = std::find_if(names.begin(), names.end(), [&](const std::string& n) { return cut.count(n); });
        if (s == names.end()) continue;
        diags.error(split.where, "split '" + split.name + "' cuts '" + *s + "', which bounds the values of input '" +
                                     t.name + "' (" + values_range_text(t) + "): they index the whole of '" + *s +
                                     "', of which each device would hold a part, so the entries of the other parts "
                                     "would be lost; do not split '" + *s + "'");
        ok = false;
        break;
      }
    }
    // - an output without any of the split's dimensions (a sum over them):
    //   each device would return a partial result.
    for (const Tensor& t : op.outputs) {
      if (std::any_of(t.shape.begin(), t.shape.end(), [&](const Dim& d) { return cut.count(d.symbol); })) continue;
      diags.error(split.where, "split '" + split.name + "' cuts no dimension of output '" + t.name +
                                   "', so each device would return it computed from its part alone (a partial sum, "
                                   "say); split only dimensions that every output has, or drop the split");
      ok = false;
    }
  }
  return ok;
}

bool resolve(Op& op, Diagnostics& diags) {
  if (!resolve_symbols(diags, op)) return false;
  if (!check_unique_names(diags, op)) return false;
  if (!resolve_constraints(diags, op)) return false;
  if (!resolve_value_ranges(diags, op)) return false;
  if (!resolve_sizes(diags, op)) return false;
  if (!resolve_platform_lists(diags, op)) return false;
  if (!resolve_splits(diags, op)) return false;
  // vmap by expand_dims/broadcast_all adds leading dimensions to every
  // operand and result: each must take them in its '...'.
  const bool all_batched =
      std::all_of(op.inputs.begin(), op.inputs.end(), [](const Tensor& t) { return t.batch; }) &&
      std::all_of(op.outputs.begin(), op.outputs.end(), [](const Tensor& t) { return t.batch; });
  if ((op.vmap_method == "expand_dims" || op.vmap_method == "broadcast_all") && !all_batched) {
    diags.error(op.xla_where, "vmap_method '" + op.vmap_method +
                                  "' adds leading dimensions to every operand: every input and output shape must start with '...'");
    return false;
  }
  if (op.batch_partitionable.value_or(false) && !op.splittable_by_batch()) {
    diags.error(op.xla_where,
                "batch_partitionable runs the op on each device's shard of the batch, with no communication: every output "
                "shape must start with '...' (an output without it, such as a sum over the batch, would need one), and "
                "some input's must");
    return false;
  }
  return !op.backward || resolve_backward(op, *op.backward, diags);
}

}  // namespace opgen::gen
