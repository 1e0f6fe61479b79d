#include "spec_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "names.h"

namespace opgen {
namespace {

// Where a second, non-empty YAML document starts, if the text has one. It
// reads at most two documents through yaml-cpp's event parser: yaml-cpp
// 0.7's LoadAll can produce empty documents forever on malformed input.
class ContentSeen : public YAML::EventHandler {
 public:
  std::optional<YAML::Mark> first;
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  // A bare null is not content: yaml-cpp 0.7 reports one for some malformed
  // text, which the first document's parse already answers.
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { seen(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override { seen(m); }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override { seen(m); }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override { seen(m); }
  void OnMapEnd() override {}

 private:
  void seen(const YAML::Mark& m) {
    if (!first) first = m;
  }
};

std::optional<YAML::Mark> second_document(const std::string& text) {
  // A second document needs a '---' or '...' marker at the start of a line;
  // without one, skip the second parse.
  const bool marker = text.rfind("---", 0) == 0 || text.rfind("...", 0) == 0 ||
                      text.find("\n---") != std::string::npos || text.find("\n...") != std::string::npos;
  if (!marker) return std::nullopt;
  std::istringstream in(text);
  YAML::Parser parser(in);
  ContentSeen ignored;
  if (!parser.HandleNextDocument(ignored)) return std::nullopt;
  ContentSeen second;
  if (!parser.HandleNextDocument(second)) return std::nullopt;
  return second.first;
}

// Reads one file: wraps yaml-cpp nodes with located, typed accessors that
// report instead of throwing.
class SpecFile {
 public:
  SpecFile(std::string display_path, Diagnostics& diags)
      : path_(std::move(display_path)), diags_(diags) {}

  Location at(const YAML::Node& node) const {
    if (!node.IsDefined()) return whole_file();  // a key the spec does not have
    const YAML::Mark m = node.Mark();
    if (m.is_null()) return {path_, 0, 0};
    return {path_, m.line + 1, m.column + 1};
  }
  Location at(const YAML::Mark& m) const { return {path_, m.line + 1, m.column + 1}; }
  Location whole_file() const { return {path_, 0, 0}; }

  void error(const Location& where, std::string message) { diags_.error(where, std::move(message)); }

  // The file's bytes. Only a regular file of at most kMaxSpecBytes is read:
  // a device (/dev/zero), a pipe or a runaway file is refused before it can
  // block opgen or fill its memory.
  bool read_text(const std::string& fs_path, std::string& text) {
    // O_NONBLOCK: opening a pipe with no writer must not wait.
    const int fd = ::open(fs_path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      error(whole_file(), std::string("cannot open the spec file: ") + std::strerror(errno));
      return false;
    }
    struct stat st;
    bool ok = ::fstat(fd, &st) == 0;
    if (ok && !S_ISREG(st.st_mode)) {
      error(whole_file(), "is not a regular file; a spec is a YAML file");
      ok = false;
    } else if (ok && st.st_size > kMaxSpecBytes) {
      error(whole_file(), "is " + std::to_string(st.st_size) + " bytes; a spec may be at most " +
                              std::to_string(kMaxSpecBytes) + " bytes");
      ok = false;
    }
    // Read at most one byte past the limit: the file may grow after fstat.
    for (char buf[1 << 16]; ok;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        error(whole_file(), std::string("cannot read the spec file: ") + std::strerror(errno));
        ok = false;
      }
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > static_cast<size_t>(kMaxSpecBytes)) {
        error(whole_file(), "grew past " + std::to_string(kMaxSpecBytes) + " bytes while it was read");
        ok = false;
      }
    }
    ::close(fd);
    return ok;
  }

  // Loads the document; reports a YAML syntax error at its position.
  std::optional<YAML::Node> load(const std::string& fs_path) {
    std::string text;
    if (!read_text(fs_path, text)) return std::nullopt;
    try {
      YAML::Node root = YAML::Load(text);
      if (std::optional<YAML::Mark> second = second_document(text)) {
        error(at(*second), "a spec is one YAML document; this file holds more (remove the '---' separators)");
        return std::nullopt;
      }
      if (!root.IsMap()) {
        error(root.IsDefined() && !root.IsNull() ? at(root) : whole_file(),
              "a spec must be a YAML mapping of keys to values");
        return std::nullopt;
      }
      return root;
    } catch (const YAML::DeepRecursion& e) {
      error(at(e.mark), "the YAML nests too deeply for the reader (a spec needs a few levels)");
      return std::nullopt;
    } catch (const YAML::Exception& e) {
      std::string hint;
      if (!e.mark.is_null()) {
        std::istringstream lines(text);
        std::string line;
        for (int i = 0; i <= e.mark.line && std::getline(lines, line); ++i) {
        }
        if (line.find('\t') != std::string::npos) hint = " (this line holds a tab: YAML indents with spaces only)";
        else if (line.find("[]") != std::string::npos && line.find('{') != std::string::npos) {
          hint = " (inside {...}, quote an array type: type: \"i64[]\")";
        }
      }
      error(at(e.mark), "invalid YAML: " + e.msg + hint);
      return std::nullopt;
    }
  }

  // The entries of a mapping, in document order, with every key checked
  // against `allowed`. Duplicate and unknown keys are reported (with a likely
  // fix where one is close); their values are skipped.
  std::vector<std::pair<std::string, YAML::Node>> entries(const YAML::Node& map,
                                                          const std::string& what,
                                                          const std::vector<std::string>& allowed) {
    std::vector<std::pair<std::string, YAML::Node>> out;
    std::set<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node key = it->first;
      if (!key.IsScalar()) {
        error(at(key), "keys of " + what + " must be plain names");
        continue;
      }
      const std::string name = key.Scalar();
      if (!seen.insert(name).second) {
        error(at(key), "duplicate key '" + name + "' in " + what);
        continue;
      }
      if (!allowed.empty() &&
          std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        std::string message = "unknown key '" + name + "' in " + what;
        std::string fix = closest_match(name, allowed);
        if (!fix.empty()) {
          message += "; did you mean '" + fix + "'?";
        } else {
          message += " (expected one of:";
          for (const std::string& a : allowed) message += " " + a;
          message += ")";
        }
        error(at(key), message);
        continue;
      }
      out.emplace_back(name, it->second);
    }
    return out;
  }

  // Reports each key of `required` that `map` lacks.
  void require(const YAML::Node& map, const std::string& what,
               const std::vector<std::string>& required) {
    for (const std::string& key : required) {
      if (!map[key]) error(at(map), what + " is missing the required key '" + key + "'");
    }
  }

  bool expect_map(const YAML::Node& node, const std::string& what) {
    if (node.IsMap()) return true;
    error(at(node), what + " must be a mapping");
    return false;
  }

  bool expect_sequence(const YAML::Node& node, const std::string& what) {
    if (node.IsSequence()) return true;
    error(at(node), what + " must be a list, such as [a, b]");
    return false;
  }

  std::optional<std::string> string(const YAML::Node& node, const std::string& what) {
    if (!node.IsScalar()) {
      error(at(node), what + " must be a string");
      return std::nullopt;
    }
    return node.Scalar();
  }

  // An integer written as a plain (unquoted) YAML scalar.
  std::optional<int64_t> integer(const YAML::Node& node, const std::string& what) {
    if (!node.IsScalar() || node.Tag() == "!") {
      error(at(node), what + " must be an integer");
      return std::nullopt;
    }
    const std::string& text = node.Scalar();
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE) {
      error(at(node), what + " must be an integer, not '" + text + "'");
      return std::nullopt;
    }
    return v;
  }

  std::optional<double> real(const YAML::Node& node, const std::string& what) {
    if (!node.IsScalar() || node.Tag() == "!") {
      error(at(node), what + " must be a number");
      return std::nullopt;
    }
    const std::string& text = node.Scalar();
    errno = 0;
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    // strtod reports ERANGE for subnormal results too; only overflow is an error.
    if (text.empty() || *end != '\0' || !std::isfinite(v) || (errno == ERANGE && std::fabs(v) > 1.0)) {
      error(at(node), what + " must be a finite number, not '" + text + "'");
      return std::nullopt;
    }
    return v;
  }

  std::optional<bool> boolean(const YAML::Node& node, const std::string& what) {
    if (node.IsScalar() && node.Tag() != "!") {
      if (node.Scalar() == "true") return true;
      if (node.Scalar() == "false") return false;
    }
    error(at(node), what + " must be true or false");
    return std::nullopt;
  }

  std::optional<std::string> snake_name(const YAML::Node& node, const std::string& what) {
    std::optional<std::string> s = string(node, what);
    if (!s) return std::nullopt;
    return checked_snake_name(*s, at(node), what) ? s : std::nullopt;
  }

  bool checked_snake_name(const std::string& s, const Location& where, const std::string& what) {
    if (!is_snake_identifier(s)) {
      error(where, what + " '" + s +
                       "' is not a valid name: use lower case letters, digits and '_', "
                       "starting with a letter, with no '__' and no trailing '_'");
      return false;
    }
    if (is_reserved_name(s)) {
      error(where, what + " '" + s + "' is reserved in C++, Python or the generated code");
      return false;
    }
    return true;
  }

 private:
  std::string path_;
  Diagnostics& diags_;
};

// The spec spelling of a dtype written as numpy, C or torch names it, or "".
std::string dtype_alias(const std::string& s) {
  static const std::map<std::string, std::string> aliases = {
      {"float16", "f16"}, {"half", "f16"},     {"fp16", "f16"},     {"bfloat16", "bf16"},
      {"float32", "f32"}, {"float", "f32"},    {"fp32", "f32"},     {"float64", "f64"},
      {"double", "f64"},  {"fp64", "f64"},     {"int32", "i32"},    {"int", "i32"},
      {"int64", "i64"},   {"long", "i64"},     {"uint8", "u8"},     {"byte", "u8"},
      {"bool_", "bool"},  {"pred", "bool"},    {"s32", "i32"},      {"s64", "i64"},
      {"F16", "f16"},     {"BF16", "bf16"},    {"F32", "f32"},      {"F64", "f64"},
      {"I32", "i32"},     {"I64", "i64"},      {"U8", "u8"},        {"S32", "i32"},
      {"S64", "i64"},     {"PRED", "bool"}};
  auto it = aliases.find(s);
  return it == aliases.end() ? "" : it->second;
}

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

// Parses an output dimension expression: integers and shape symbols joined
// by + - * / and parentheses, e.g. `2*D`, `D/H`, `(N+1)*2`.
class ExprParser {
 public:
  explicit ExprParser(std::string_view text) : text_(text) {}

  std::shared_ptr<const Expr> parse(std::string& error) {
    std::shared_ptr<const Expr> e = sum(error);
    skip_space();
    if (e && pos_ != text_.size()) {
      error = "unexpected '" + std::string(text_.substr(pos_, 1)) + "' at column " + std::to_string(pos_ + 1) + " of the expression";
      return nullptr;
    }
    return error.empty() ? e : nullptr;
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  static std::shared_ptr<const Expr> node(Expr::Kind kind, std::shared_ptr<const Expr> lhs,
                                          std::shared_ptr<const Expr> rhs) {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->lhs = std::move(lhs);
    e->rhs = std::move(rhs);
    return e;
  }
  std::shared_ptr<const Expr> sum(std::string& error) {
    std::shared_ptr<const Expr> e = product(error);
    while (e) {
      if (accept('+')) e = node(Expr::Kind::kAdd, e, product(error));
      else if (accept('-')) e = node(Expr::Kind::kSub, e, product(error));
      else break;
      if (!e->rhs) return nullptr;
    }
    return e;
  }
  std::shared_ptr<const Expr> product(std::string& error) {
    std::shared_ptr<const Expr> e = atom(error);
    while (e) {
      if (accept('*')) e = node(Expr::Kind::kMul, e, atom(error));
      else if (accept('/')) e = node(Expr::Kind::kDiv, e, atom(error));
      else break;
      if (!e->rhs) return nullptr;
      if (e->kind == Expr::Kind::kDiv && e->rhs->kind == Expr::Kind::kInt && e->rhs->value == 0) {
        error = "it divides by zero";
        return nullptr;
      }
    }
    return e;
  }
  std::shared_ptr<const Expr> atom(std::string& error) {
    skip_space();
    if (accept('(')) {
      if (++depth_ > 32) {
        error = "the expression nests more than 32 parentheses deep";
        return nullptr;
      }
      std::shared_ptr<const Expr> e = sum(error);
      --depth_;
      if (e && !accept(')')) {
        error = "missing ')' in the expression";
        return nullptr;
      }
      return e;
    }
    const size_t start = pos_;
    if (pos_ < text_.size() && is_ascii_digit(text_[pos_])) {
      while (pos_ < text_.size() && is_ascii_digit(text_[pos_])) ++pos_;
      auto e = std::make_shared<Expr>();
      e->kind = Expr::Kind::kInt;
      const std::string digits(text_.substr(start, pos_ - start));
      if (digits.size() > 18) {
        error = "the number " + digits + " in the expression is too large";
        return nullptr;
      }
      e->value = std::stoll(digits);
      return e;
    }
    while (pos_ < text_.size() && (is_ascii_lower(text_[pos_]) || is_ascii_upper(text_[pos_]) ||
                                   is_ascii_digit(text_[pos_]) || text_[pos_] == '_')) {
      ++pos_;
    }
    const std::string name(text_.substr(start, pos_ - start));
    if (name.empty()) {
      error = pos_ < text_.size() ? "unexpected '" + std::string(text_.substr(pos_, 1)) + "' in the expression"
                                  : "the expression ends too early";
      return nullptr;
    }
    if (!is_symbol_identifier(name) || is_reserved_name(name)) {
      error = "'" + name + "' in the expression is not a valid shape symbol";
      return nullptr;
    }
    auto e = std::make_shared<Expr>();
    e->kind = Expr::Kind::kSymbol;
    e->symbol = name;
    return e;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

void expr_symbols(const Expr& e, std::vector<std::string>& out) {
  if (e.kind == Expr::Kind::kSymbol) out.push_back(e.symbol);
  if (e.lhs) expr_symbols(*e.lhs, out);
  if (e.rhs) expr_symbols(*e.rhs, out);
}

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
    d.expr = ExprParser(text).parse(error);
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
  const auto fields = role == "input" ? f.entries(node, what, {"dtype", "shape", "doc", "optional"})
                                       : f.entries(node, what, {"dtype", "shape", "doc", "alias"});
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
                   : type_vars.empty() ? " (supported: f16, bf16, f32, f64, i32, i64, u8, bool, or a type variable declared under 'types')"
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
        ok = read_dim(f, dim, what, role == "output", first, t) && ok;
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
    }
  }
  if (!ok || !have_dtype || !have_shape) return std::nullopt;
  return t;
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
                               (fix.empty() ? std::string(" (supported: f16, bf16, f32, f64, i32, i64, u8, bool)")
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

std::string bound_text(const std::optional<AttrValue>& b) {
  if (!b) return std::string();
  if (std::holds_alternative<int64_t>(*b)) return std::to_string(std::get<int64_t>(*b));
  std::ostringstream s;
  s << std::get<double>(*b);
  return s.str();
}

// Whether `v` lies in the attribute's [min, max]; reports it at `node` if not.
bool check_in_range(SpecFile& f, const Attr& a, const AttrValue& v, const YAML::Node& node,
                    const std::string& what) {
  if ((a.min && numeric_less(v, *a.min)) || (a.max && numeric_less(*a.max, v))) {
    f.error(f.at(node), what + " is outside its range [" + bound_text(a.min) + ", " + bound_text(a.max) + "]");
    return false;
  }
  return true;
}

// A value of attribute `a` (a default), checked against its values, range
// and size.
std::optional<AttrValue> read_attr_value(SpecFile& f, const Attr& a, const YAML::Node& node,
                                         const std::string& what) {
  if (a.type == AttrType::kEnum) {
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

// `values:` of an enum attribute: distinct names, each a C++ enumerator.
bool read_enum_values(SpecFile& f, const YAML::Node& node, const std::string& what, Attr& a) {
  if (!f.expect_sequence(node, "the values of " + what)) return false;
  bool ok = true;
  for (const YAML::Node& v : node) {
    std::optional<std::string> s = f.snake_name(v, "a value of " + what);
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

std::optional<Attr> read_attr(SpecFile& f, const std::string& name, const YAML::Node& node,
                              const Location& name_at) {
  const std::string what = "attribute '" + name + "'";
  Attr a;
  a.name = name;
  a.where = name_at;
  bool ok = f.checked_snake_name(name, name_at, "attribute name");
  if (!f.expect_map(node, what)) return std::nullopt;
  auto fields = f.entries(node, what, {"type", "default", "doc", "min", "max", "values", "size", "unique"});
  f.require(node, what, {"type"});
  bool have_type = false;
  for (const auto& [key, value] : fields) {
    if (key != "type") continue;
    std::optional<std::string> s = f.string(value, "the type of " + what);
    if (!s) return std::nullopt;
    std::optional<AttrType> type = parse_attr_type(*s);
    if (!type) {
      std::string fix = dtype_alias(*s);
      if (fix.empty() || !parse_attr_type(fix)) fix = closest_match(*s, {"bool", "i32", "i64", "f32", "f64", "enum", "i32[]", "i64[]"});
      f.error(f.at(value), "unsupported type '" + *s + "' for " + what +
                               (fix.empty() ? std::string(" (supported: bool, i32, i64, f32, f64, enum, i32[], i64[])")
                                            : "; did you mean '" + fix + "'?"));
      return std::nullopt;
    }
    a.type = *type;
    have_type = true;
  }
  if (!have_type) return std::nullopt;
  const bool enum_ = a.type == AttrType::kEnum;
  const bool array = is_array(a.type);
  if (enum_ && !node["values"]) {
    f.error(f.at(node), "enum " + what + " is missing the required key 'values' (the strings it may take)");
    ok = false;
  }
  // The properties first: the default is checked against them.
  for (const auto& [key, value] : fields) {
    if (key == "values") {
      if (!enum_) {
        f.error(f.at(value), "'values' applies only to an enum attribute; " + what + " is " + info(a.type).name);
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
    } else if (key == "min" || key == "max") {
      if (a.type == AttrType::kBool || enum_) {
        f.error(f.at(value), "'" + key + "' does not apply to the " + info(a.type).name + " " + what);
        ok = false;
        continue;
      }
      std::optional<AttrValue> bound = read_scalar_value(f, element_type(a.type), value, "the " + key + " of " + what);
      if (!bound) {
        ok = false;
        continue;
      }
      (key == "min" ? a.min : a.max) = bound;
    } else if (key == "doc") {
      std::optional<std::string> s = f.string(value, "the doc of " + what);
      if (s) a.doc = *s;
      else ok = false;
    }
  }
  if (ok && a.min && a.max && numeric_less(*a.max, *a.min)) {
    f.error(a.where, "the min of " + what + " is greater than its max");
    ok = false;
  }
  if (ok && node["default"]) {
    a.default_value = read_attr_value(f, a, node["default"], "the default of " + what);
    if (!a.default_value) ok = false;
  }
  if (!ok) return std::nullopt;
  return a;
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

// Binds every shape symbol to its first required input dimension, gives each
// aliasing output its input's dtype and shape, and checks that outputs use
// only bound symbols, that `...` in an output has an input to take its batch
// dimensions from, and that every type variable is bound by an input.
bool resolve_symbols(SpecFile& f, Op& op) {
  bool ok = true;
  std::map<std::string, bool> bound;
  bool input_batch = false;
  // Optional inputs come last, so that the frameworks' argument lists (and
  // the custom call's operands) are the required inputs, then those given.
  for (size_t i = 1; i < op.inputs.size(); ++i) {
    if (op.inputs[i - 1].optional && !op.inputs[i].optional) {
      f.error(op.inputs[i].where, "required input '" + op.inputs[i].name + "' follows optional input '" +
                                      op.inputs[i - 1].name + "'; list the optional inputs last");
      ok = false;
    }
  }
  if (std::all_of(op.inputs.begin(), op.inputs.end(), [](const Tensor& t) { return t.optional; })) {
    f.error(op.inputs[0].where, "every input is optional; at least the first must be required");
    return false;
  }
  if (!ok) return false;  // the ordering error above says what to fix
  // The presence mask is a u32 in legacy descriptors.
  if (op.optional_inputs() > 32) {
    f.error(op.inputs[op.required_inputs() + 32].where, "an op may have at most 32 optional inputs");
    return false;
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
  for (const Tensor& t : op.inputs) {
    if (!t.optional) continue;
    if (t.batch && !input_batch) {
      f.error(t.where, "optional input '" + t.name + "' has batch dimensions ('...') but no required input has any to match");
      ok = false;
    }
    for (const Dim& d : t.shape) {
      if (!d.symbol.empty() && !bound.count(d.symbol)) {
        f.error(d.where, "shape symbol '" + d.symbol + "' of optional input '" + t.name +
                             "' is not bound by a required input (an absent input cannot give its size)");
        ok = false;
      }
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
      f.error(t.where, "output '" + t.name + "' aliases '" + t.alias + "', which is not an input" +
                           (fix.empty() ? std::string() : "; did you mean '" + fix + "'?"));
      ok = false;
      continue;
    }
    if (input->optional) {
      f.error(t.where, "output '" + t.name + "' aliases optional input '" + t.alias + "'; an in-place output needs its input in every call");
      ok = false;
      continue;
    }
    if (!aliased.emplace(t.alias, t.name).second) {
      f.error(t.where, "output '" + t.name + "' aliases input '" + t.alias + "', which output '" + aliased[t.alias] + "' already aliases");
      ok = false;
      continue;
    }
    t.dtype = input->dtype;
    t.type_var = input->type_var;
    t.batch = input->batch;
    t.shape = input->shape;
  }
  for (const Tensor& t : op.outputs) {
    if (t.batch && !input_batch) {
      f.error(t.where, "output '" + t.name + "' has batch dimensions ('...') but no input has any to take them from");
      ok = false;
    }
    for (const Dim& d : t.shape) {
      std::vector<std::string> used;
      if (d.expr) expr_symbols(*d.expr, used);
      else if (!d.symbol.empty()) used.push_back(d.symbol);
      for (const std::string& s : used) {
        if (bound.count(s)) continue;
        f.error(d.where, "shape symbol '" + s + "' of output '" + t.name + "' is not bound by any input's shape");
        ok = false;
      }
    }
  }
  for (const TypeVar& v : op.type_vars) {
    auto uses = [&](const std::vector<Tensor>& ts) {
      return std::any_of(ts.begin(), ts.end(), [&](const Tensor& t) { return t.type_var == v.name; });
    };
    const std::vector<Tensor> required(op.inputs.begin(), op.inputs.begin() + op.required_inputs());
    if (!uses(required)) {
      f.error(v.where, "type variable '" + v.name + "' is not the dtype of any " +
                           (uses(op.inputs) ? "required " : "") + "input, so a call cannot bind it");
      ok = false;
    }
  }
  return ok;
}

// Every name lands in one C++ struct and one Python signature.
bool check_unique_names(SpecFile& f, const Op& op) {
  bool ok = true;
  std::map<std::string, std::pair<std::string, Location>> owner;
  auto claim = [&](const std::string& name, const std::string& role, const Location& where) {
    auto [it, inserted] = owner.emplace(name, std::make_pair(role, where));
    if (!inserted) {
      const Location& first = it->second.second;
      f.error(where, "the name '" + name + "' of this " + role + " is already used by the " +
                         it->second.first + " at line " + std::to_string(first.line) +
                         "; inputs, outputs, attributes, shape symbols and type variables share one namespace");
      ok = false;
    }
  };
  for (const Tensor& t : op.inputs) claim(t.name, "input", t.where);
  for (const Tensor& t : op.outputs) claim(t.name, "output", t.where);
  for (const Attr& a : op.attrs) claim(a.name, "attribute", a.where);
  for (const SymbolBinding& s : op.symbols) {
    const Dim& d = op.inputs[s.input].shape[s.axis];
    claim(s.symbol, "shape symbol", d.where);
  }
  for (const TypeVar& v : op.type_vars) claim(v.name, "type variable", v.where);
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
      f.error(a.where, "enum attribute '" + a.name + "' names its C++ type '" + type + "', which " + it->second +
                           " already uses; rename the attribute");
      ok = false;
    }
  }
  // torch.compile functionalizes an op that updates an input in place
  // through a helper whose own parameter is named `mode`.
  if (std::any_of(op.outputs.begin(), op.outputs.end(), [](const Tensor& t) { return !t.alias.empty(); })) {
    auto refuse_mode = [&](const std::string& name, const Location& where, const std::string& kind) {
      if (name != "mode") return;
      f.error(where, "an op with an in-place output cannot have an " + kind + " named 'mode': torch.compile's "
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

void read_platforms(SpecFile& f, const YAML::Node& node, Op& op, bool& ok) {
  if (!f.expect_sequence(node, "'platforms'")) {
    ok = false;
    return;
  }
  op.platforms.clear();
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
    } else if (op.has_platform(*platform)) {
      f.error(f.at(p), "platform '" + *s + "' is listed twice");
      ok = false;
    } else {
      op.platforms.push_back(*platform);
    }
  }
  if (node.size() == 0) {
    f.error(f.at(node), "'platforms' must list at least one platform");
    ok = false;
  }
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

  const int errors_before = diags.error_count();
  const auto top = f.entries(
      root, "the spec", {"opgen", "name", "doc", "types", "inputs", "outputs", "attrs", "platforms", "xla"});
  f.require(root, "the spec", {"opgen", "name", "inputs", "outputs"});
  if (!check_format_version(f, root)) ok = false;
  // Type variables first: tensors refer to them wherever `types:` stands.
  for (const auto& [key, value] : top) {
    if (key != "types") continue;
    ok = read_type_vars(f, value, op.type_vars) && ok;
    // Every combination is compiled into every binding: keep their number sane.
    size_t combinations = 1;
    for (const TypeVar& v : op.type_vars) combinations *= std::max<size_t>(1, v.dtypes.size());
    if (combinations > kMaxInstantiations) {
      f.error(f.at(value), "the type variables give " + std::to_string(combinations) +
                               " dtype combinations; at most " + std::to_string(kMaxInstantiations) +
                               " are compiled into each binding");
      ok = false;
    }
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
        if (a) op.attrs.push_back(*a);
        else ok = false;
      }
    } else if (key == "platforms") {
      read_platforms(f, value, op, ok);
    } else if (key == "xla") {
      read_xla(f, value, op, ok);
    }
  }
  if (!ok || op.name.empty() || op.inputs.empty() || op.outputs.empty()) return std::nullopt;
  if (!resolve_symbols(f, op)) return std::nullopt;
  if (!check_unique_names(f, op)) return std::nullopt;
  // vmap by expand_dims/broadcast_all, and batch partitioning, add leading
  // dimensions to every operand and result: each must take them in its '...'.
  const bool all_batched =
      std::all_of(op.inputs.begin(), op.inputs.end(), [](const Tensor& t) { return t.batch; }) &&
      std::all_of(op.outputs.begin(), op.outputs.end(), [](const Tensor& t) { return t.batch; });
  const Location xla_at = root["xla"] ? f.at(root["xla"]) : f.at(root);
  if ((op.vmap_method == "expand_dims" || op.vmap_method == "broadcast_all") && !all_batched) {
    f.error(xla_at, "vmap_method '" + op.vmap_method +
                        "' adds leading dimensions to every operand: every input and output shape must start with '...'");
    return std::nullopt;
  }
  if (op.batch_partitionable && !all_batched) {
    f.error(xla_at, "batch_partitionable lets XLA split leading dimensions: every input and output shape must start with '...'");
    return std::nullopt;
  }
  // Any error reported on the way (an unknown or duplicate key, say) fails the spec.
  if (diags.error_count() > errors_before) return std::nullopt;
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

}  // namespace opgen
