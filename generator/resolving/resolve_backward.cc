// `backward:` checked against its op, then against the backward op (resolve_backward.h).
#include "resolving/resolve_backward.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

namespace opgen::gen {
namespace {

bool is_floating(DType d) {
  return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32 || d == DType::kF64;
}

// Whether a gradient can flow into `t`: every dtype it may have is floating.
bool differentiable(const Op& op, const Tensor& t) {
  if (t.type_var.empty()) return is_floating(t.dtype);
  for (const TypeVar& v : op.type_vars) {
    if (v.name == t.type_var) return std::all_of(v.dtypes.begin(), v.dtypes.end(), is_floating);
  }
  return false;
}

const Tensor* find(const std::vector<Tensor>& ts, const std::string& name) {
  for (const Tensor& t : ts) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string names_of(const std::vector<Tensor>& ts) {
  std::string out;
  for (const Tensor& t : ts) out += (out.empty() ? "" : ", ") + t.name;
  return out;
}

// A tensor's shape as the spec writes it: [..., D].
std::string shape_text(const Tensor& t) {
  std::string out = t.batch ? "..." : "";
  for (const Dim& d : t.shape) out += (out.empty() ? "" : ", ") + d.text;
  return "[" + out + "]";
}

// A dimension of a forward tensor as the gradient check compares it: its
// size or its symbol (which names one value across the op); "" for an
// expression, which no gradient's dimension is checked against.
std::string dim_term(const Dim& d) {
  if (d.fixed) return std::to_string(*d.fixed);
  return d.symbol;
}

// A tensor's dtype as its op sees it: a dtype, or the type variable that
// gives it (one of a single dtype is that dtype). Type variables are never
// named like dtypes, so the two cannot be taken for each other.
std::string dtype_term(const Op& op, const Tensor& t) {
  if (t.type_var.empty()) return info(t.dtype).name;
  for (const TypeVar& v : op.type_vars) {
    if (v.name == t.type_var && v.dtypes.size() == 1) return info(v.dtypes.front()).name;
  }
  return t.type_var;
}

// The forward tensor a backward input is given: a forward input, or a
// forward output (whose cotangent has its dtype and shape).
const Tensor* forward_tensor(const Op& op, const BackwardArg& arg) {
  return arg.kind == BackwardArg::Kind::kInput ? find(op.inputs, arg.name) : find(op.outputs, arg.name);
}

// The optional forward input that a forward tensor is there with (itself, or
// the one an output updates), or "" for one that every call has.
std::string present_with(const Tensor& t) {
  if (!t.optional) return "";
  return t.alias.empty() ? t.name : t.alias;
}

// Each gradient has its input's dtype and shape: torch would cast and sum or
// broadcast one that has not, silently. The backward op's type variables and
// symbols mean what the forward tensors its inputs are given bind them to.
void check_gradients(const Op& op, const Op& back, Diagnostics& diags) {
  const Backward& b = *op.backward;
  std::map<std::string, std::string> dtype_of;  // backward type variable -> forward dtype term
  // Backward symbol ('...' for the batch) -> the forward dimensions it equals,
  // each with the optional forward input it equals it only when given ("": always).
  std::map<std::string, std::set<std::pair<std::string, std::string>>> dims_of;
  for (size_t i = 0; i < b.inputs.size(); ++i) {
    const Tensor& in = back.inputs[i];
    const Tensor* given = forward_tensor(op, b.inputs[i]);
    // The first input of a variable binds it (optional inputs come last).
    if (!in.type_var.empty()) dtype_of.emplace(in.type_var, dtype_term(op, *given));
    if (in.batch != given->batch || in.shape.size() != given->shape.size()) continue;
    // Every dimension that names a symbol equals it (the backward op checks
    // that at each call it is given), so each such pairing ties the symbol to
    // the forward's dimension.
    const std::string when = present_with(*given);
    if (in.batch) dims_of["..."].emplace("...", when);
    for (size_t k = 0; k < in.shape.size(); ++k) {
      const std::string term = dim_term(given->shape[k]);
      if (!in.shape[k].symbol.empty() && !term.empty()) dims_of[in.shape[k].symbol].emplace(term, when);
    }
  }
  for (size_t i = 0; i < b.gradients.size(); ++i) {
    const auto& [out, in] = b.gradients[i];
    const Tensor* g = find(back.outputs, out);
    const Tensor* x = find(op.inputs, in);
    if (!g || !x) continue;  // reported above
    // Ties that hold whenever x is given (its gradient is not needed otherwise).
    auto tied = [&](const std::string& symbol, const std::string& term) {
      const auto& ties = dims_of[symbol];
      return ties.count({term, ""}) || ties.count({term, present_with(*x)});
    };
    std::string dtype = dtype_term(back, *g);
    if (!g->type_var.empty() && dtype == g->type_var) dtype = dtype_of[dtype];
    const std::string want = dtype_term(op, *x);
    if (dtype != want) {
      diags.error(b.gradient_where[i], "'" + out + "' of '" + b.op + "' (" + back.spec_path + ") has dtype " + dtype +
                                           " but is the gradient of input '" + in + "', of dtype " + want +
                                           "; give it the dtype of '" + in + "' (torch would cast it silently)");
    }
    std::string problem;
    if (g->batch != x->batch || g->shape.size() != x->shape.size()) {
      problem = "; give it the shape of '" + in + "' (torch would sum or broadcast it silently)";
    } else if (g->batch && !tied("...", "...")) {
      problem = ": its '...' is not tied to the forward's, as no backward input with '...' is given a forward tensor "
                "with '...'";
    }
    for (size_t k = 0; k < g->shape.size() && problem.empty(); ++k) {
      const Dim& d = g->shape[k];
      const std::string want_dim = dim_term(x->shape[k]);
      const bool same = d.fixed ? d.fixed == x->shape[k].fixed : !d.symbol.empty() && tied(d.symbol, want_dim);
      if (same) continue;
      problem = ": its dimension " + d.text + " is not tied to dimension " + want_dim + " of '" + in +
                "'; use a fixed size equal to it, or a symbol of a backward input that 'backward: inputs' gives a "
                "forward tensor with that dimension";
    }
    if (!problem.empty()) {
      diags.error(b.gradient_where[i], "'" + out + "' of '" + b.op + "' (" + back.spec_path + ") has shape " +
                                           shape_text(*g) + " but is the gradient of input '" + in + "', of shape " +
                                           shape_text(*x) + problem);
    }
  }
}

}  // namespace
bool resolve_backward(const Op& op, Backward& b, Diagnostics& diags) {
  bool ok = true;
  if (b.op == op.name) {
    diags.error(b.where, "an op cannot be its own backward");
    ok = false;
  }
  for (BackwardArg& arg : b.inputs) {
    const bool input = find(op.inputs, arg.name) != nullptr, output = find(op.outputs, arg.name) != nullptr;
    const Tensor* asked = output ? find(op.outputs, arg.name) : nullptr;
    if (asked && !asked->on_request()) asked = nullptr;
    if (arg.kind == BackwardArg::Kind::kCotangent) {
      if (!output) {
        diags.error(arg.where, "'grad(" + arg.name + ")' names no output of '" + op.name + "' (outputs: " +
                                   names_of(op.outputs) + ")");
        ok = false;
      } else if (asked) {
        // Outputs on request get no gradient: a call that did not ask for
        // one would have no cotangent to pass.
        diags.error(arg.where, "output '" + arg.name + "' is optional (made only when the caller asks for it), so it "
                                   "gets no gradient; 'grad(" + arg.name + ")' cannot be a backward input");
        ok = false;
      }
    } else if (input) {
      arg.kind = BackwardArg::Kind::kInput;
      // PyTorch runs an in-place op on the caller's tensor: what it held
      // before the call is gone when the backward runs.
      for (const Tensor& o : op.outputs) {
        if (o.alias == arg.name) {
          diags.error(arg.where, "input '" + arg.name + "' is updated in place by output '" + o.name +
                                     "', so its value before the call is gone when the backward runs; pass '" + o.name +
                                     "' (or save what the backward needs as another output)");
          ok = false;
        }
      }
    } else if (output) {
      // An output on request too: check_backwards checks that the backward
      // op's input takes None (a call that was not differentiated and did
      // not ask has none to save).
      arg.kind = BackwardArg::Kind::kOutput;
    } else {
      diags.error(arg.where, "'" + arg.name + "' is no input or output of '" + op.name +
                                 "'; a backward input is one of them, or grad(<output>) for an output's gradient");
      ok = false;
    }
  }
  std::set<std::string> targets;
  std::set<std::pair<std::string, std::string>> pairs;
  for (size_t i = 0; i < b.gradients.size(); ++i) {
    const auto& [out, in] = b.gradients[i];
    const Tensor* t = find(op.inputs, in);
    if (!pairs.insert(b.gradients[i]).second) {
      diags.error(b.gradient_where[i], "'" + out + "' is listed as the gradient of '" + in + "' twice");
      ok = false;
      continue;
    }
    if (std::find(b.unused.begin(), b.unused.end(), out) != b.unused.end()) {
      diags.error(b.gradient_where[i], "backward output '" + out + "' is in 'gradients' and in 'unused'");
      ok = false;
    }
    if (!t) {
      diags.error(b.gradient_where[i], "'" + in + "' is no input of '" + op.name + "' (inputs: " + names_of(op.inputs) + ")");
      ok = false;
    } else if (!differentiable(op, *t)) {
      diags.error(b.gradient_where[i], "input '" + in + "' is not a floating-point tensor, so it has no gradient");
      ok = false;
    } else if (!targets.insert(in).second) {
      diags.error(b.gradient_where[i], "input '" + in + "' is given two gradients");
      ok = false;
    }
  }
  for (size_t i = 0; i < b.no_gradient.size(); ++i) {
    if (!find(op.inputs, b.no_gradient[i])) {
      diags.error(b.no_gradient_where[i], "'" + b.no_gradient[i] + "' is no input of '" + op.name + "'");
      ok = false;
    } else if (!targets.insert(b.no_gradient[i]).second) {
      diags.error(b.no_gradient_where[i], "input '" + b.no_gradient[i] + "' has a gradient and is listed in no_gradient");
      ok = false;
    }
  }
  // A floating input the backward neither differentiates nor excuses would
  // silently get a zero gradient.
  for (const Tensor& t : op.inputs) {
    if (differentiable(op, t) && !targets.count(t.name)) {
      diags.error(b.where, "floating-point input '" + t.name + "' gets no gradient from '" + b.op +
                               "'; map a backward output to it in 'gradients', or list it in 'no_gradient'");
      ok = false;
    }
  }
  return ok;
}

void check_backwards(const std::vector<Op>& ops, Diagnostics& diags) {
  auto find_op = [&](const std::string& name) -> const Op* {
    for (const Op& o : ops) {
      if (o.name == name) return &o;
    }
    return nullptr;
  };
  for (const Op& op : ops) {
    if (!op.backward) continue;
    const Backward& b = *op.backward;
    const Op* back = find_op(b.op);
    if (!back) {
      diags.error(b.where, "backward op '" + b.op + "' is not among the specs given (check the package's whole folder)");
      continue;
    }
    // Trailing optional inputs of the backward op may be left out (None).
    size_t required = back->inputs.size();
    while (required > 0 && back->inputs[required - 1].optional) --required;
    const bool inputs_fit = b.inputs.size() <= back->inputs.size() && b.inputs.size() >= required;
    if (!inputs_fit) {
      diags.error(b.where, "'" + b.op + "' (" + back->spec_path + ") takes " +
                               (required == back->inputs.size() ? "" : std::to_string(required) + " to ") +
                               std::to_string(back->inputs.size()) + " inputs; 'backward: inputs' lists " +
                               std::to_string(b.inputs.size()));
    }
    // An output on request reaches the backward only where it was made
    // (asked for, or by the routes themselves when the call is
    // differentiated; torch.ops.<ns>.<op> called bare makes it only when
    // asked): the backward op's input must take None, and recompute.
    for (size_t i = 0; i < b.inputs.size(); ++i) {
      const BackwardArg& arg = b.inputs[i];
      const Tensor* t = arg.kind == BackwardArg::Kind::kOutput ? find(op.outputs, arg.name) : nullptr;
      if (!t || !t->on_request() || i >= back->inputs.size() || back->inputs[i].optional) continue;
      diags.error(arg.where, "output '" + arg.name + "' is optional (made only when the caller asks for it), so " +
                                 "the backward gets None where it was not made; make input '" + back->inputs[i].name +
                                 "' of '" + b.op + "' (" + back->spec_path + ") optional (optional: true)");
    }
    std::set<std::string> mapped(b.unused.begin(), b.unused.end());
    for (const auto& g : b.gradients) mapped.insert(g.first);
    for (const Tensor& t : back->outputs) {
      if (!mapped.count(t.name)) {
        diags.error(b.where, "output '" + t.name + "' of '" + b.op +
                                 "' is not in 'gradients': say which input it is the gradient of, or list it in 'unused'");
      }
      mapped.erase(t.name);
    }
    for (const std::string& name : mapped) {
      diags.error(b.where, "'gradients' or 'unused' names '" + name + "', which is no output of '" + b.op + "'");
    }
    for (const Attr& a : back->attrs) {
      const auto it = std::find_if(op.attrs.begin(), op.attrs.end(), [&](const Attr& f) { return f.name == a.name; });
      if (it == op.attrs.end() || it->type != a.type) {
        diags.error(b.where, "attribute '" + a.name + "' of '" + b.op + "' must be an attribute of '" + op.name +
                                 "' of the same type, which passes it on");
      }
    }
    for (Platform p : op.platforms) {
      if (std::find(back->platforms.begin(), back->platforms.end(), p) == back->platforms.end()) {
        diags.error(b.where, "'" + b.op + "' must run on every platform '" + op.name + "' runs on");
        break;
      }
    }
    // The backward's dtypes and sizes are read off the inputs it is given.
    if (inputs_fit) check_gradients(op, *back, diags);
  }
}

}  // namespace opgen::gen
