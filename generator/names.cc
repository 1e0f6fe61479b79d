#include "names.h"

#include <algorithm>
#include <set>

namespace opgen {
namespace {

bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

bool is_snake_identifier(std::string_view s) {
  if (s.empty() || !is_lower(s[0])) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return is_lower(c) || is_digit(c) || c == '_'; });
}

bool is_symbol_identifier(std::string_view s) {
  if (s.empty() || !(is_lower(s[0]) || is_upper(s[0]))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return is_lower(c) || is_upper(c) || is_digit(c) || c == '_'; });
}

bool is_reserved_name(std::string_view s) {
  static const std::set<std::string, std::less<>> reserved = {
      // C++
      "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
      "case", "catch", "char", "char16_t", "char32_t", "char8_t", "class", "co_await", "co_return",
      "co_yield", "compl", "concept", "const", "const_cast", "consteval", "constexpr", "constinit",
      "continue", "decltype", "default", "delete", "do", "double", "dynamic_cast", "else", "enum",
      "explicit", "export", "extern", "false", "float", "for", "friend", "goto", "if", "inline",
      "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq", "nullptr",
      "operator", "or", "or_eq", "private", "protected", "public", "register", "reinterpret_cast",
      "requires", "return", "short", "signed", "sizeof", "static", "static_assert", "static_cast",
      "struct", "switch", "template", "this", "thread_local", "throw", "true", "try", "typedef",
      "typeid", "typename", "union", "unsigned", "using", "virtual", "void", "volatile",
      "wchar_t", "while", "xor", "xor_eq",
      // Python
      "None", "True", "False", "as", "assert", "async", "await", "def", "del", "elif", "except",
      "finally", "from", "global", "import", "in", "is", "lambda", "nonlocal", "pass", "raise",
      "with", "yield", "match", "case", "type",
      // names the generated code itself declares next to spec names
      "args", "stream", "status", "api_version", "buffers", "opaque", "opaque_len", "self",
      "jax", "jnp", "np", "ffi", "opgen"};
  return reserved.count(s) > 0;
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = 0;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    if (best.empty() || d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  // Close enough to be a typo: at most a third of the word wrong.
  if (best.empty() || best_distance == 0 || best_distance > std::max<size_t>(1, word.size() / 3)) {
    return "";
  }
  return best;
}

}  // namespace opgen
