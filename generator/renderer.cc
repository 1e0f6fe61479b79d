#include "renderer.h"

#include <pybind11/embed.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "names.h"
#include "output_writer.h"

namespace py = pybind11;

namespace opgen {
namespace {

// The Jinja2 environment and the escaping filters. Spec text reaches
// generated code only through these filters, never raw.
constexpr const char* kEnvironmentCode = R"PY(
import hashlib
import re
import unicodedata

import jinja2
import jinja2.compiler

# Printable ASCII but '"', '\\' and '?' (trigraphs): kept as they are.
_CPP_PLAIN = re.compile(r'[ !#->@-\[\]-~]*')

def cpp_string(s):
    """A C++ string literal: printable ASCII kept, everything else octal."""
    if _CPP_PLAIN.fullmatch(s):
        return '"' + s + '"'
    out = ['"']
    for b in s.encode('utf-8'):
        c = chr(b)
        if c in '"\\':
            out.append('\\' + c)
        elif 32 <= b < 127 and c != '?':
            out.append(c)
        else:
            out.append('\\%03o' % b)  # fixed width: never swallows a digit
    out.append('"')
    return ''.join(out)

def py_string(s):
    """A Python string literal (repr escapes quotes, newlines, controls)."""
    return repr(str(s))

def comment_lines(s, marker):
    """Spec text as line comments: one comment per line (split wherever any
    language might break a line), control and bidi characters replaced, and
    trailing white space and backslashes dropped (GCC splices a line at a
    backslash followed by white space too), so text cannot leave the comment."""
    out = []
    for line in str(s).splitlines() or ['']:
        line = ''.join('?' if unicodedata.category(c) in ('Cc', 'Cf') else c for c in line)
        while True:
            stripped = line.rstrip().rstrip('\\')
            if stripped == line:
                break
            line = stripped
        out.append((marker + ' ' + line).rstrip())
    return '\n'.join(out)

def py_tuple(items):
    """Python source of a tuple of the given item sources: (), (a,), (a, b)."""
    items = list(items)
    return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"

def md_text(s):
    """Spec text as Markdown prose: HTML is escaped, so text cannot inject markup."""
    return str(s).replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')

def md_cell(s):
    """Spec text in a Markdown table cell: one line, '|' escaped."""
    return ' '.join(md_text(s).split()).replace('|', '\\|')

def md_code(s):
    """Text inside a `code span` of a table cell: no backticks, '|' escaped."""
    return ' '.join(str(s).replace('`', "'").split()).replace('|', '\\|')

class CodeGenerator(jinja2.compiler.CodeGenerator):
    """Template data is dicts, and Jinja2 compiles `x.key` to a call of
    Environment.getattr, which tries an attribute first: the most frequent
    operation of every template, at the cost of a Python call each. This
    compiles it to an inline dict lookup instead, which leaves anything else
    (a loop object, a string method, a missing key) to Environment.getattr.
    `_o` is assigned and read within one conditional expression, so nested
    lookups cannot see each other's."""

    @jinja2.compiler.optimizeconst
    def visit_Getattr(self, node, frame):
        if self.environment.is_async:
            return super().visit_Getattr(node, frame)
        key = repr(node.attr)
        self.write('(_o[%s] if type(_o := ' % key)
        self.visit(node.node, frame)
        self.write(') is dict and %s in _o else environment.getattr(_o, %s))' % (key, key))

class Environment(jinja2.Environment):
    """Template data is dicts: a key comes before an attribute of the same name
    (for the lookups left to getattr, and for Jinja2's constant folding)."""

    code_generator_class = CodeGenerator

    def getattr(self, obj, attribute):
        if type(obj) is dict and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)

def make_environment(templates_dir, cache_dir, environment_code):
    env = Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        # Compiled templates, checked against each template's source: saves
        # compiling them on every run. Named after this code too, which
        # decides what the templates compile to.
        bytecode_cache=jinja2.FileSystemBytecodeCache(
            cache_dir, 'opgen-%s-' + hashlib.sha1((jinja2.__version__ + environment_code).encode()).hexdigest()[:12] + '.cache')
        if cache_dir else None,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        auto_reload=False,  # one run: no need to stat every template on every use
    )
    env.filters['cpp_string'] = cpp_string
    env.filters['py_string'] = py_string
    env.filters['py_tuple'] = py_tuple
    env.filters['md_text'] = md_text
    env.filters['md_cell'] = md_cell
    env.filters['md_code'] = md_code
    env.filters['cpp_comment'] = lambda s: comment_lines(s, '//')
    env.filters['py_comment'] = lambda s: comment_lines(s, '#')
    add_plain_filters(env)
    return env

def add_plain_filters(env):
    """The built-in filters the templates call most, with a fast path for the
    forms they use (an attribute of dicts that have it, a filter or test by
    name that takes no context, a string separator): Jinja2's own pass each
    call through its async and context plumbing, a sixth of the render time.
    Anything else goes to Jinja2's own filter, so the results are the same."""
    builtin = dict(env.filters)

    def plain(f):
        return f is not None and getattr(f, 'jinja_pass_arg', None) is None

    def all_have(seq, attribute):
        return all(type(x) is dict and attribute in x for x in seq)

    @jinja2.pass_context
    def map_(context, seq, *args, **kwargs):
        seq = list(seq)
        if not args and list(kwargs) == ['attribute'] and all_have(seq, kwargs['attribute']):
            attribute = kwargs['attribute']
            return iter([x[attribute] for x in seq])
        if len(args) == 1 and not kwargs and plain(env.filters.get(args[0])):
            f = env.filters[args[0]]
            return iter([f(x) for x in seq])
        return builtin['map'](context, seq, *args, **kwargs)

    @jinja2.pass_context
    def selectattr(context, seq, *args):
        seq = list(seq)
        if args and all_have(seq, args[0]):
            if len(args) == 1:
                return iter([x for x in seq if x[args[0]]])
            test = env.tests.get(args[1])
            if plain(test):
                return iter([x for x in seq if test(x[args[0]], *args[2:])])
        return builtin['selectattr'](context, seq, *args)

    @jinja2.pass_eval_context
    def join(eval_ctx, seq, d='', attribute=None):
        if attribute is None and type(d) is str and not eval_ctx.autoescape:
            return d.join([s if type(s) is str else str(s) for s in seq])
        return builtin['join'](eval_ctx, seq, d, attribute)

    @jinja2.pass_environment
    def first(environment, seq):
        for x in seq:
            return x
        return environment.undefined('No first item, sequence was empty.')

    env.filters.update(map=map_, selectattr=selectattr, join=join, first=first, list=list, length=len)
)PY";

// The Python that opgen embeds should be the one the user works in, so that
// Jinja2 comes from their virtualenv: OPGEN_PYTHON, else the active
// virtualenv, else the interpreter opgen was built against.
std::string choose_python_executable() {
  if (const char* p = std::getenv("OPGEN_PYTHON"); p && *p) {
    if (!std::filesystem::exists(p)) {
      throw std::runtime_error(std::string("OPGEN_PYTHON=") + p + " does not exist");
    }
    return p;
  }
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv && *venv) {
    std::filesystem::path candidate = std::filesystem::path(venv) / "bin" / "python3";
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return OPGEN_DEFAULT_PYTHON;
}

std::string hex64(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

// Literals that read back to exactly the spec's value.
std::string float_literal(double v, bool single) {
  char buf[64];
  std::snprintf(buf, sizeof buf, single ? "%.9g" : "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// Each dtype's template data, made once and shared by every tensor, type
// variable and instantiation that names it (templates only read it).
class DTypeData {
 public:
  DTypeData() {
    for (const DTypeInfo& i : all_dtypes()) {
      py::dict d;
      // Its index in the dtype table: the code legacy descriptors carry.
      d["code"] = static_cast<int>(dicts_.size());
      d["name"] = i.name;
      d["cpp"] = i.cpp;
      d["ffi"] = i.ffi;
      d["numpy"] = i.numpy;
      d["torch"] = i.torch;
      d["torch_scalar"] = i.torch_scalar;
      d["size"] = i.size;
      dicts_.push_back(d);
    }
  }
  const py::dict& operator[](DType d) const { return dicts_.at(&info(d) - &all_dtypes().front()); }
  const std::vector<py::dict>& all() const { return dicts_; }

 private:
  std::vector<py::dict> dicts_;
};

// An output dimension expression as a tree of dicts that the templates
// spell in C++ and Python: {kind: int, value}, {kind: symbol, symbol}, or
// {kind: + - * /, lhs, rhs, symbolic: whether a symbol occurs below}.
py::dict expr_tree(const Expr& e, bool* symbolic) {
  py::dict node;
  switch (e.kind) {
    case Expr::Kind::kInt:
      node["kind"] = "int";
      node["value"] = e.value;
      *symbolic = false;
      return node;
    case Expr::Kind::kSymbol:
      node["kind"] = "symbol";
      node["symbol"] = e.symbol;
      *symbolic = true;
      return node;
    default:
      break;
  }
  bool left = false, right = false;
  node["kind"] = e.kind == Expr::Kind::kAdd ? "+" : e.kind == Expr::Kind::kSub ? "-" : e.kind == Expr::Kind::kMul ? "*" : "/";
  node["lhs"] = expr_tree(*e.lhs, &left);
  node["rhs"] = expr_tree(*e.rhs, &right);
  *symbolic = left || right;
  node["symbolic"] = *symbolic;
  return node;
}

// "[..., N, 2*D]": the declared shape as the spec writes it.
std::string declared_text(const Tensor& t) {
  std::string out = "[";
  if (t.batch) out += t.shape.empty() ? "..." : "..., ";
  for (size_t i = 0; i < t.shape.size(); ++i) out += (i ? ", " : "") + t.shape[i].text;
  return out + "]";
}

// "a, b, c".
std::string comma_list(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

// Python source of a tuple of the given item sources: (), (a,), (a, b).
std::string python_tuple(const std::vector<std::string>& items) {
  return items.size() == 1 ? "(" + items[0] + ",)" : "(" + comma_list(items) + ")";
}

// Where a shape symbol gets its value, as messages say it: "input 'x'
// dimension 0 after its '...'".
std::string binding_place(const Op& op, const SymbolBinding& s) {
  const Tensor& t = op.inputs[s.input];
  return "input '" + t.name + "' dimension " + std::to_string(s.axis) + (t.batch ? " after its '...'" : "");
}

py::dict tensor_data(const Tensor& t, int index, const Op& op, bool is_input, const DTypeData& dtypes) {
  py::dict out;
  out["name"] = t.name;
  out["index"] = index;
  out["doc"] = t.doc;
  out["type_var"] = t.type_var.empty() ? py::object(py::none()) : py::object(py::str(t.type_var));
  out["dtype"] = t.type_var.empty() ? py::object(dtypes[t.dtype]) : py::object(py::none());
  out["dtype_text"] = t.type_var.empty() ? std::string(info(t.dtype).name) : t.type_var;
  out["batch"] = t.batch;
  out["optional"] = t.optional;
  out["alias"] = t.alias.empty() ? py::object(py::none()) : py::object(py::str(t.alias));
  out["alias_index"] = py::none();
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (!t.alias.empty() && op.inputs[i].name == t.alias) out["alias_index"] = i;
  }
  // Inputs: the output that updates it in place, if any.
  out["aliased_by"] = py::none();
  for (const Tensor& o : op.outputs) {
    if (is_input && o.alias == t.name) out["aliased_by"] = o.name;
  }
  out["py_param"] = t.optional ? t.name + "=None" : t.name;
  // How the typed-FFI handler reaches the buffer's members: an output is a
  // Result and an optional input a std::optional, both through '->'.
  out["ffi_member"] = !is_input || t.optional ? "->" : ".";
  out["rank"] = t.shape.size();
  out["declared"] = declared_text(t);
  py::list dims;
  for (size_t axis = 0; axis < t.shape.size(); ++axis) {
    const Dim& d = t.shape[axis];
    py::dict dim;
    dim["axis"] = axis;
    dim["text"] = d.text;
    dim["size"] = d.fixed ? py::object(py::int_(*d.fixed)) : py::object(py::none());
    dim["symbol"] = d.symbol.empty() ? py::object(py::none()) : py::object(py::str(d.symbol));
    // `rule`: why the dimension must have its size, in a shape error.
    if (d.fixed) {
      dim["kind"] = "fixed";
      dim["rule"] = "a fixed size";
    } else if (d.expr) {
      bool symbolic = false;
      dim["kind"] = "expr";
      dim["rule"] = d.text;
      dim["tree"] = expr_tree(*d.expr, &symbolic);
    } else {
      const auto s = std::find_if(op.symbols.begin(), op.symbols.end(),
                                  [&](const SymbolBinding& b) { return b.symbol == d.symbol; });
      // The reader refuses a symbol that no required input binds.
      if (s == op.symbols.end()) throw std::logic_error("shape symbol " + d.symbol + " of " + op.name + " is unbound");
      const bool binds = is_input && s->input == index && s->axis == static_cast<int>(axis);
      dim["kind"] = binds ? "bind" : "symbol";
      dim["rule"] = d.symbol + ", bound by " + binding_place(op, *s);
    }
    dims.append(dim);
  }
  out["dims"] = dims;
  return out;
}

// An attribute value as Python source and as a default in a torch schema.
struct AttrLiteral {
  std::string py, torch;
};

AttrLiteral attr_literal(const Attr& a, const AttrValue& v) {
  if (std::holds_alternative<bool>(v)) {
    const std::string t = std::get<bool>(v) ? "True" : "False";
    return {t, t};
  }
  if (std::holds_alternative<int64_t>(v)) {
    const std::string t = std::to_string(std::get<int64_t>(v));
    return {t, t};
  }
  if (std::holds_alternative<double>(v)) {
    const std::string t = float_literal(std::get<double>(v), a.type == AttrType::kF32);
    return {t, t};
  }
  if (std::holds_alternative<std::string>(v)) {
    // Enum values are snake_case names: nothing to escape.
    return {"'" + std::get<std::string>(v) + "'", "\"" + std::get<std::string>(v) + "\""};
  }
  std::vector<std::string> items;
  for (int64_t x : std::get<std::vector<int64_t>>(v)) items.push_back(std::to_string(x));
  // A tuple, so that a default is never a shared mutable list.
  return {python_tuple(items), "[" + comma_list(items) + "]"};
}

py::dict attr_data(const Attr& a) {
  const AttrTypeInfo& i = info(a.type);
  const bool array = is_array(a.type);
  const bool enum_ = a.type == AttrType::kEnum;
  py::dict out;
  out["name"] = a.name;
  out["doc"] = a.doc;
  out["kind"] = enum_ ? "enum" : array ? "array" : "scalar";
  py::dict type;  // of the value, or of one element of an array
  type["cpp"] = i.cpp;
  type["numpy"] = i.numpy;
  out["type"] = type;
  // The type of the Args field the kernel reads.
  const std::string enum_type = enum_ ? enum_type_name(a.name) : std::string();
  out["enum_type"] = enum_type;
  out["cpp"] = enum_ ? enum_type : array ? "opgen::Span<const " + std::string(i.cpp) + ">" : std::string(i.cpp);
  // The type the typed XLA FFI decodes the attribute as.
  out["ffi_cpp"] = enum_ ? std::string("std::string_view")
                 : array ? "::xla::ffi::Span<const " + std::string(i.cpp) + ">"
                         : std::string(i.cpp);
  py::list values;
  std::string values_text;
  for (const std::string& v : a.values) {
    values.append(v);
    values_text += (values_text.empty() ? "" : ", ") + v;
  }
  out["values"] = values;
  out["values_text"] = values_text;
  // How the type reads in docs and in Python annotations.
  std::string quoted;
  for (const std::string& v : a.values) quoted += (quoted.empty() ? "'" : ", '") + v + "'";
  const std::string element = info(element_type(a.type)).name;
  out["type_text"] = enum_ ? "one of " + quoted
                     : array ? element + "[" + (a.size ? std::to_string(*a.size) : std::string()) + "]"
                             : std::string(i.name);
  out["py_annotation"] = enum_ ? "Literal[" + quoted + "]" : std::string(i.py_type);
  out["size"] = a.size ? py::object(py::int_(*a.size)) : py::object(py::none());
  out["unique"] = a.unique;
  out["type_name"] = i.name;
  out["has_default"] = a.default_value.has_value();
  const AttrLiteral literal = a.default_value ? attr_literal(a, *a.default_value) : AttrLiteral{};
  out["default_py"] = literal.py;
  out["py_param"] = a.default_value ? a.name + "=" + literal.py : a.name;
  out["ffi_param"] = out["ffi_cpp"].cast<std::string>() + " " + a.name;
  // A bound as Python and docs spell it, and as a C++ literal: -2^63 has
  // none (2^63 does not fit), so it is written as an expression.
  auto bound = [&](const std::optional<AttrValue>& v, bool cpp) -> py::object {
    if (!v) return py::none();
    if (std::holds_alternative<int64_t>(*v)) {
      const int64_t i = std::get<int64_t>(*v);
      if (cpp && i == INT64_MIN) return py::str("(-9223372036854775807 - 1)");
      return py::str(std::to_string(i));
    }
    return py::str(float_literal(std::get<double>(*v), false));
  };
  out["min"] = bound(a.min, false);
  out["max"] = bound(a.max, false);
  out["min_cpp"] = bound(a.min, true);
  out["max_cpp"] = bound(a.max, true);
  return out;
}

// The legacy descriptor: header, then a u8 dtype code per type variable,
// the batch count and the shape symbols as i64, then the attributes in spec
// order, then the elements of array attributes; little-endian and unpadded. One description feeds both the C++
// decoder and the Python encoder.
py::dict opaque_data(const Op& op, const std::string& package) {
  constexpr int kHeaderSize = 16;  // magic[4], layout u16, reserved u16, fingerprint u64
  py::list fields;
  std::string format = "<4sHHQ";
  int offset = kHeaderSize;
  auto add = [&](const std::string& name, const char* kind, const char* cpp, int size,
                 const char* struct_code) {
    py::dict f;
    f["name"] = name;
    f["kind"] = kind;
    f["cpp"] = cpp;
    f["offset"] = offset;
    f["size"] = size;
    f["code"] = struct_code;
    fields.append(f);
    format += struct_code;
    offset += size;
    return f;
  };
  // The dtype of each type variable, as its index in the dtype table.
  for (const TypeVar& v : op.type_vars) add("dtype_" + v.name, "dtype", "uint8_t", 1, "B")["type_var"] = v.name;
  // Bit i set: the i-th optional input is given (and is among the buffers).
  if (op.optional_inputs() > 0) add("present_", "present", "uint32_t", 4, "I");
  if (op.has_batch()) add(kBatchField, "batch", "int64_t", 8, "q");
  for (const SymbolBinding& s : op.symbols) add(s.symbol, "symbol", "int64_t", 8, "q");
  // An enum travels as its index; an array as its length here, with its
  // elements after the fixed fields (`tail`), in attribute order.
  py::list tail;
  for (const Attr& a : op.attrs) {
    const AttrTypeInfo& i = info(a.type);
    if (is_array(a.type)) {
      const AttrTypeInfo& e = info(element_type(a.type));
      py::dict f = add(a.name, "array", "uint32_t", i.size, i.struct_format);
      f["element_cpp"] = e.cpp;
      f["element_size"] = e.size;
      f["element_format"] = e.struct_format;
      tail.append(f);
    } else {
      add(a.name, a.type == AttrType::kEnum ? "enum" : "attr", i.cpp, i.size, i.struct_format);
    }
  }
  py::dict out;
  out["fields"] = fields;
  out["tail"] = tail;
  out["size"] = offset;
  out["header_size"] = kHeaderSize;
  out["struct_format"] = format;
  out["fingerprint"] = hex64(op.opaque_fingerprint(package));
  out["layout_version"] = kOpaqueLayoutVersion;
  return out;
}

// The torch.library schema: tensors positional, attributes keyword-only
// with their defaults, e.g. "simple_add(Tensor a, Tensor b, *, float alpha=1.0) -> Tensor".
// The lowered schema is what the stable-ABI kernel registers when the op has
// attributes that ABI cannot carry on torch 2.9 (str, int[]): an enum as its
// index, an array as a CPU tensor (see torch_lowered()).
std::string torch_schema(const Op& op, bool lowered) {
  std::string s = op.name + (lowered ? "__lowered(" : "(");
  // A tensor updated in place is a mutable alias, `Tensor(a!)`; torch
  // custom ops may not return it, so only the other outputs are returned.
  char alias_set = 'a';
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const Tensor& t = op.inputs[i];
    const bool mutated = std::any_of(op.outputs.begin(), op.outputs.end(), [&](const Tensor& o) { return o.alias == t.name; });
    const std::string type = t.optional ? "Tensor?" : mutated ? std::string("Tensor(") + alias_set++ + "!)" : "Tensor";
    s += (i ? ", " : "") + type + " " + t.name + (t.optional ? "=None" : "");
  }
  if (!op.attrs.empty()) s += ", *";
  for (const Attr& a : op.attrs) {
    if (lowered && a.type == AttrType::kEnum) {
      s += ", int " + a.name;
    } else if (lowered && is_array(a.type)) {
      s += ", Tensor " + a.name;
    } else {
      s += std::string(", ") + info(a.type).torch_schema + " " + a.name;
      if (a.default_value) s += "=" + attr_literal(a, *a.default_value).torch;
    }
  }
  s += ") -> ";
  const size_t fresh = std::count_if(op.outputs.begin(), op.outputs.end(), [](const Tensor& o) { return o.alias.empty(); });
  if (fresh == 1) return s + "Tensor";
  s += "(";
  for (size_t i = 0; i < fresh; ++i) s += (i ? ", " : "") + std::string("Tensor");
  return s + ")";
}

bool torch_lowered(const Op& op) {
  return std::any_of(op.attrs.begin(), op.attrs.end(),
                     [](const Attr& a) { return a.type == AttrType::kEnum || is_array(a.type); });
}

const char* platform_name(Platform p) { return p == Platform::kCuda ? "cuda" : "cpu"; }

py::dict op_data(const Op& op, const Package& package, const DTypeData& dtype_data) {
  py::dict out;
  out["name"] = op.name;
  out["doc"] = op.doc;
  out["spec_path"] = op.spec_path;
  out["namespace"] = package.name + "::" + op.name;
  py::list inputs, outputs, attrs, symbols;
  for (size_t i = 0; i < op.inputs.size(); ++i) inputs.append(tensor_data(op.inputs[i], i, op, true, dtype_data));
  for (size_t i = 0; i < op.outputs.size(); ++i) outputs.append(tensor_data(op.outputs[i], i, op, false, dtype_data));
  for (const Attr& a : op.attrs) attrs.append(attr_data(a));
  for (const SymbolBinding& s : op.symbols) {
    py::dict d;
    d["name"] = s.symbol;
    d["input"] = s.input;
    d["input_name"] = op.inputs[s.input].name;
    d["axis"] = s.axis;
    d["where"] = binding_place(op, s);
    symbols.append(d);
  }
  out["inputs"] = inputs;
  out["required_inputs"] = inputs[py::slice(0, op.required_inputs(), 1)];
  out["optional_inputs"] = inputs[py::slice(op.required_inputs(), op.inputs.size(), 1)];
  out["outputs"] = outputs;
  py::list fresh, aliased;
  for (size_t i = 0; i < op.outputs.size(); ++i) (op.outputs[i].alias.empty() ? fresh : aliased).append(outputs[i]);
  out["fresh_outputs"] = fresh;      // allocated by the binding
  out["aliased_outputs"] = aliased;  // an input's buffer, updated in place
  out["attrs"] = attrs;
  out["symbols"] = symbols;
  py::list platforms;
  for (Platform p : op.platforms) platforms.append(platform_name(p));
  out["platforms"] = platforms;
  out["cuda"] = op.has_platform(Platform::kCuda);
  out["cpu"] = op.has_platform(Platform::kCpu);
  out["api_versions"] = op.api_versions;
  out["ffi"] = op.has_api_version(4);
  std::vector<int> legacy;
  for (int v : op.api_versions) if (v != 4) legacy.push_back(v);
  out["legacy_versions"] = legacy;
  out["command_buffer_compatible"] = op.command_buffer_compatible;
  out["opaque"] = opaque_data(op, package.name);
  out["ffi_target"] = package.name + "_" + op.name + "_ffi";
  const bool lowered = torch_lowered(op);
  out["torch_schema"] = torch_schema(op, false);
  out["torch_lowered"] = lowered;
  out["torch_kernel_schema"] = torch_schema(op, lowered);
  out["torch_kernel_name"] = op.name + (lowered ? "__lowered" : "");
  out["has_batch"] = op.has_batch();
  out["batch_source"] = py::none();
  for (const Tensor& t : op.inputs) {
    if (t.batch && !t.optional) {
      out["batch_source"] = t.name;  // the input whose leading dimensions define the batch
      break;
    }
  }
  out["vmap_method"] = op.vmap_method;
  out["batch_partitionable"] = op.batch_partitionable;
  py::list type_vars;
  std::string template_params, type_args;
  for (const TypeVar& v : op.type_vars) {
    py::dict d;
    d["name"] = v.name;
    py::list dtypes;
    std::string names;
    for (DType t : v.dtypes) {
      dtypes.append(dtype_data[t]);
      names += (names.empty() ? "" : ", ") + std::string(info(t).name);
    }
    d["dtypes"] = dtypes;
    d["names"] = names;
    // The first input whose dtype the variable is: it binds the variable.
    for (const Tensor& t : op.inputs) {
      if (t.type_var == v.name && !t.optional) {
        d["bound_by"] = t.name;
        break;
      }
    }
    type_vars.append(d);
    template_params += (template_params.empty() ? "" : ", ") + std::string("typename ") + v.name;
    type_args += (type_args.empty() ? "" : ", ") + v.name;
  }
  out["type_vars"] = type_vars;
  out["template_params"] = template_params;
  // `template <typename T>` before a declaration over Args, and its Args type.
  out["template_decl"] = op.type_vars.empty() ? std::string() : "template <" + template_params + ">\n";
  out["args_type"] = op.type_vars.empty() ? std::string("Args") : "Args<" + type_args + ">";
  // The instantiation's index in the header's Instantiations from each type
  // variable's position <V>_i_ among its dtypes (the first varies slowest).
  std::string index;
  size_t stride = 1;
  for (size_t k = op.type_vars.size(); k-- > 0;) {
    const std::string term = op.type_vars[k].name + "_i_" + (stride == 1 ? "" : " * " + std::to_string(stride));
    index = index.empty() ? term : term + " + " + index;
    stride *= op.type_vars[k].dtypes.size();
  }
  out["instantiation_index"] = index.empty() ? std::string("0") : index;
  // Each dtype assignment, in the order of Op::instantiations():
  // `template_args` spells out its <...> after Args.
  py::list instantiations;
  std::string instantiation_types;  // Args<...> of each, in order
  for (const auto& assignment : op.instantiations()) {
    std::string targs;
    for (const TypeVar& v : op.type_vars) targs += (targs.empty() ? "" : ", ") + std::string(info(assignment.at(v.name)).cpp);
    const std::string template_args = op.type_vars.empty() ? std::string() : "<" + targs + ">";
    instantiation_types += (instantiation_types.empty() ? "Args" : ", Args") + template_args;
    py::dict inst;
    inst["template_args"] = template_args;
    instantiations.append(inst);
  }
  out["instantiations"] = instantiations;
  out["instantiation_types"] = instantiation_types;
  // torch_xla passes attributes only through the opaque backend_config, so
  // its custom call uses the first legacy version the spec lists.
  int xla_version = 0;
  for (int v : op.api_versions) {
    if (v != 4) {
      xla_version = v;
      break;
    }
  }
  out["torch_xla_api_version"] = xla_version;

  // Every (platform, api_version) pair that gets a handler. XLA:CPU runs
  // only api_version 3 of the legacy ABI (1 and 2 are refused there), so a
  // CPU handler exists for 4 and 3 alone.
  py::list targets;
  for (Platform p : op.platforms) {
    for (int v : op.api_versions) {
      if (p == Platform::kCpu && (v == 1 || v == 2)) continue;
      py::dict t;
      t["platform"] = platform_name(p);
      t["api_version"] = v;
      t["target"] = v == 4 ? package.name + "_" + op.name + "_ffi"
                           : package.name + "_" + op.name + "_legacy_v" + std::to_string(v);
      t["symbol"] = package.name + "_" + op.name + "_" + platform_name(p) +
                    (v == 4 ? std::string("_ffi") : "_legacy_v" + std::to_string(v));
      targets.append(t);
    }
  }
  out["targets"] = targets;
  return out;
}

}  // namespace

std::vector<std::string> op_output_paths(const std::string& package, const std::string& op) {
  const std::string include_dir = "include/" + package + "/";
  return {include_dir + op + ".h",           include_dir + op + "_opaque.h",
          "src/" + op + "_xla_ffi.cc",        "src/" + op + "_xla_legacy.cc",
          "src/" + op + "_torch.cc",          "python/" + package + "/_ops/" + op + ".py",
          "docs/" + op + ".md"};
}

// Spec paths as they appear in the generated-from stamp, a comment in every
// output: anything but plain path characters becomes '?', so a folder name
// cannot end the comment.
std::string stamp_text(const std::string& paths) {
  std::string out = paths;
  for (char& c : out) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '/' || c == ',' || c == ' ' || c == '+' || c == '@' ||
                       (c == '-');
    if (!plain) c = '?';
  }
  // "--" would end a Markdown (HTML) comment.
  for (size_t i = out.find("--"); i != std::string::npos; i = out.find("--", i)) out[i + 1] = '?';
  return out;
}

// Where compiled templates are kept between runs: $OPGEN_CACHE_DIR (empty:
// no cache), else $XDG_CACHE_HOME/opgen, else ~/.cache/opgen. "" when the
// folder cannot be made: the cache only saves time, so opgen runs without it.
std::string template_cache_dir() {
  namespace fs = std::filesystem;
  fs::path dir;
  if (const char* explicit_dir = std::getenv("OPGEN_CACHE_DIR")) {
    if (!*explicit_dir) return "";
    dir = explicit_dir;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    dir = fs::path(xdg) / "opgen";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = fs::path(home) / ".cache" / "opgen";
  } else {
    return "";
  }
  dir /= "jinja-bytecode";
  std::error_code ec;
  fs::create_directories(dir, ec);
  return ec || !fs::is_directory(dir, ec) ? "" : dir.string();
}

struct Renderer::Impl {
  std::unique_ptr<py::scoped_interpreter> interpreter;
  py::object environment;
  struct Job {
    std::string template_name, path;
    py::object compiled;  // the jinja2.Template
    py::dict context;
  };
  std::vector<Job> jobs;
};

Renderer::Renderer(const std::string& templates_dir) : impl_(std::make_unique<Impl>()) {
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.parse_argv = 0;
  config.install_signal_handlers = 0;
  const std::string python = choose_python_executable();
  PyStatus status = PyConfig_SetBytesString(&config, &config.executable, python.c_str());
  if (PyStatus_Exception(status)) {
    PyConfig_Clear(&config);
    throw std::runtime_error("cannot configure the embedded Python for " + python);
  }
  impl_->interpreter = std::make_unique<py::scoped_interpreter>(&config, 0, nullptr, false);
  try {
    py::dict scope;
    py::exec(kEnvironmentCode, scope);
    const std::string cache = template_cache_dir();
    impl_->environment = scope["make_environment"](
        templates_dir, cache.empty() ? py::object(py::none()) : py::object(py::str(cache)), kEnvironmentCode);
  } catch (const py::error_already_set& e) {
    std::string where = python;
    throw std::runtime_error(
        "cannot load Jinja2 in the Python that opgen embeds (" + where + "): " + e.what() +
        "\nInstall Jinja2 there (pip install jinja2), or point OPGEN_PYTHON at a Python "
        "of the same version that has it.");
  }
}

Renderer::~Renderer() {
  // Python objects must go before the interpreter does.
  impl_->jobs.clear();
  impl_->environment = py::object();
}

std::string Renderer::render_one(const std::string& template_name,
                                 const std::vector<std::pair<std::string, std::string>>& values) {
  py::dict context;
  for (const auto& [key, value] : values) context[py::str(key)] = value;
  try {
    return impl_->environment.attr("get_template")(template_name).attr("render")(**context).cast<std::string>();
  } catch (const py::error_already_set& e) {
    throw std::runtime_error("template " + template_name + " failed: " + e.what());
  }
}

void Renderer::plan(const Package& package, const std::vector<Op>& ops) {
  impl_->jobs.clear();
  std::map<std::string, py::object> loaded;  // each template looked up once
  auto add = [&](const std::string& template_name, const std::string& out_path, const std::string& sources,
                 py::dict context) {
    context["generated_from"] = stamp_text(sources);
    context["template_name"] = "templates/" + template_name;
    auto it = loaded.find(template_name);
    if (it == loaded.end()) {
      try {
        it = loaded.emplace(template_name, impl_->environment.attr("get_template")(template_name)).first;
      } catch (const py::error_already_set& e) {
        throw std::runtime_error("template " + template_name + " cannot be loaded: " + e.what());
      }
    }
    impl_->jobs.push_back({template_name, out_path, it->second, context});
  };

  py::dict package_data;
  package_data["name"] = package.name;
  package_data["torch_namespace"] = package.torch_namespace;
  package_data["opaque_layout_version"] = kOpaqueLayoutVersion;
  py::list dtypes;
  const DTypeData dtype_data;
  for (const py::dict& d : dtype_data.all()) dtypes.append(d);
  package_data["dtypes"] = dtypes;
  py::list all_ops;
  std::string all_sources = package.spec_path;
  for (const Op& op : ops) {
    all_ops.append(op_data(op, package, dtype_data));
    all_sources += ", " + op.spec_path;
  }

  // Package-wide files first: the Python modules are the largest renders,
  // and workers take the next file as they finish one, so the large ones
  // start at once, on different workers, and the small ones even out the end.
  auto package_context = [&] {
    py::dict c;
    c["package"] = package_data;
    c["ops"] = all_ops;
    return c;
  };
  const std::string python_dir = "python/" + package.name + "/";
  add("jax.py.j2", python_dir + "jax.py", all_sources, package_context());
  add("torch.py.j2", python_dir + "torch.py", all_sources, package_context());
  add("module.cc.j2", "src/module.cc", all_sources, package_context());
  add("package.cmake.j2", "opgen_package.cmake", all_sources, package_context());
  add("package_init.py.j2", python_dir + "__init__.py", all_sources, package_context());
  add("ops_init.py.j2", python_dir + "_ops/__init__.py", all_sources, package_context());
  add("jax.pyi.j2", python_dir + "jax.pyi", all_sources, package_context());
  add("torch.pyi.j2", python_dir + "torch.pyi", all_sources, package_context());
  add("module.pyi.j2", python_dir + "_C.pyi", all_sources, package_context());
  add("py.typed.j2", python_dir + "py.typed", all_sources, package_context());
  add("docs_index.md.j2", "docs/README.md", all_sources, package_context());

  static const char* const kOpTemplates[] = {"kernel_interface.h.j2", "opaque_layout.h.j2", "xla_ffi.cc.j2",
                                             "xla_legacy.cc.j2",      "torch_ops.cc.j2",    "op_spec.py.j2",
                                             "op_doc.md.j2"};
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string sources = package.spec_path + ", " + ops[i].spec_path;
    const std::vector<std::string> paths = op_output_paths(package.name, ops[i].name);
    for (size_t k = 0; k < paths.size(); ++k) {
      py::dict c;
      c["package"] = package_data;
      c["op"] = all_ops[i];
      add(kOpTemplates[k], paths[k], sources, c);
    }
  }
  // Last, the manifest of everything above: what the next run may remove.
  std::vector<std::string> files;
  for (const Impl::Job& job : impl_->jobs) files.push_back(job.path);
  std::sort(files.begin(), files.end());
  py::dict manifest;
  manifest["files"] = files;
  add("manifest.txt.j2", kManifestFileName, all_sources, manifest);
  // The plan lives until the process ends: frozen, it is left out of every
  // collection, which then walks only what renders leave behind (each render's
  // context and macros form cycles), and forked workers do not copy its pages
  // for the collector's sake.
  py::module_ gc = py::module_::import("gc");
  gc.attr("collect")();
  gc.attr("freeze")();
}

size_t Renderer::file_count() const { return impl_->jobs.size(); }

const std::string& Renderer::path(size_t index) const { return impl_->jobs.at(index).path; }

RenderedFile Renderer::render(size_t index) {
  const Impl::Job& job = impl_->jobs.at(index);
  try {
    return {job.path, job.compiled.attr("render")(**job.context).cast<std::string>()};
  } catch (const py::error_already_set& e) {
    throw std::runtime_error("template " + job.template_name + " failed for " + job.path + ": " + e.what());
  }
}

}  // namespace opgen
