#include "model/names.h"

#include <algorithm>
#include <set>
#include <string>

namespace opgen::gen {
namespace {

// Optimal string alignment distance: insertions, deletions, substitutions
// and swaps of two adjacent letters ("dtpye" is one edit from "dtype").
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// Names may not end in '_' or hold "__": the generated code's own locals end
// in '_', and C++ reserves identifiers with a double underscore.
bool well_formed_tail(std::string_view s) {
  return s.back() != '_' && s.find("__") == std::string_view::npos;
}

}  // namespace

bool is_snake_identifier(std::string_view s) {
  if (s.empty() || !is_ascii_lower(s[0]) || !well_formed_tail(s)) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return is_ascii_lower(c) || is_ascii_digit(c) || c == '_'; });
}

bool is_symbol_identifier(std::string_view s) {
  if (s.empty() || !(is_ascii_lower(s[0]) || is_ascii_upper(s[0])) || !well_formed_tail(s)) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return is_ascii_lower(c) || is_ascii_upper(c) || is_ascii_digit(c) || c == '_'; });
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
      // macros of the C and CUDA headers the generated code includes
      "errno", "assert", "offsetof", "stdin", "stdout", "stderr", "setjmp", "va_start", "va_arg",
      "va_end", "va_copy", "EOF", "NULL", "BUFSIZ", "FILENAME_MAX", "RAND_MAX", "EXIT_SUCCESS",
      "EXIT_FAILURE", "CHAR_BIT", "INT_MAX", "INT_MIN", "UINT_MAX", "LONG_MAX", "LONG_MIN",
      "SIZE_MAX", "INT8_MAX", "INT16_MAX", "INT32_MAX", "INT64_MAX", "INT8_MIN", "INT16_MIN",
      "INT32_MIN", "INT64_MIN", "UINT8_MAX", "UINT16_MAX", "UINT32_MAX", "UINT64_MAX", "FLT_MAX",
      "DBL_MAX", "FLT_MIN", "DBL_MIN", "FLT_EPSILON", "DBL_EPSILON", "INFINITY", "NAN", "HUGE_VAL",
      "EDOM", "ERANGE", "EINVAL", "ENOMEM", "linux", "unix", "i386", "major", "minor",
      // names the generated code itself declares next to spec names
      "args", "stream", "status", "api_version", "buffers", "opaque", "opaque_len", "self",
      "jax", "jnp", "np", "ffi", "opgen", "std", "xla", "py", "pybind11", "xla_graph_only", "unpartitioned",
      "export_checks"};
  return reserved.count(s) > 0;
}

std::string shadowed_module(std::string_view package) {
  // Python 3.11's sys.stdlib_module_names (public, lower case), a superset of
  // later versions' for the names a package could take.
  static const std::set<std::string, std::less<>> stdlib = {
      "abc", "aifc", "antigravity", "argparse", "array", "ast", "asynchat", "asyncio", "asyncore",
      "atexit", "audioop", "base64", "bdb", "binascii", "bisect", "builtins", "bz2", "calendar", "cgi",
      "cgitb", "chunk", "cmath", "cmd", "code", "codecs", "codeop", "collections", "colorsys",
      "compileall", "concurrent", "configparser", "contextlib", "contextvars", "copy", "copyreg", "crypt",
      "csv", "ctypes", "curses", "dataclasses", "datetime", "dbm", "decimal", "difflib", "dis",
      "distutils", "doctest", "email", "encodings", "ensurepip", "enum", "errno", "faulthandler", "fcntl",
      "filecmp", "fileinput", "fnmatch", "fractions", "ftplib", "functools", "gc", "genericpath", "getopt",
      "getpass", "gettext", "glob", "graphlib", "grp", "gzip", "hashlib", "heapq", "hmac", "html", "http",
      "idlelib", "imaplib", "imghdr", "imp", "importlib", "inspect", "io", "ipaddress", "itertools",
      "json", "keyword", "lib2to3", "linecache", "locale", "logging", "lzma", "mailbox", "mailcap",
      "marshal", "math", "mimetypes", "mmap", "modulefinder", "msilib", "msvcrt", "multiprocessing",
      "netrc", "nis", "nntplib", "nt", "ntpath", "nturl2path", "numbers", "opcode", "operator", "optparse",
      "os", "ossaudiodev", "pathlib", "pdb", "pickle", "pickletools", "pipes", "pkgutil", "platform",
      "plistlib", "poplib", "posix", "posixpath", "pprint", "profile", "pstats", "pty", "pwd",
      "py_compile", "pyclbr", "pydoc", "pydoc_data", "pyexpat", "queue", "quopri", "random", "re",
      "readline", "reprlib", "resource", "rlcompleter", "runpy", "sched", "secrets", "select", "selectors",
      "shelve", "shlex", "shutil", "signal", "site", "smtpd", "smtplib", "sndhdr", "socket",
      "socketserver", "spwd", "sqlite3", "sre_compile", "sre_constants", "sre_parse", "ssl", "stat",
      "statistics", "string", "stringprep", "struct", "subprocess", "sunau", "symtable", "sys",
      "sysconfig", "syslog", "tabnanny", "tarfile", "telnetlib", "tempfile", "termios", "textwrap", "this",
      "threading", "time", "timeit", "tkinter", "token", "tokenize", "tomllib", "trace", "traceback",
      "tracemalloc", "tty", "turtle", "turtledemo", "types", "typing", "unicodedata", "unittest", "urllib",
      "uu", "uuid", "venv", "warnings", "wave", "weakref", "webbrowser", "winreg", "winsound", "wsgiref",
      "xdrlib", "xml", "xmlrpc", "zipapp", "zipfile", "zipimport", "zlib", "zoneinfo",};
  // What a package built by opgen imports, or its users import beside it.
  static const std::set<std::string, std::less<>> dependencies = {
      "jax", "jaxlib", "numpy", "ml_dtypes", "scipy", "opt_einsum", "torch", "torch_xla", "torchax", "torchgen",
      "functorch", "triton", "sympy", "networkx", "filelock", "fsspec", "jinja2", "markupsafe", "yaml",
      "pybind11", "setuptools", "pkg_resources", "pip", "scikit_build_core", "typing_extensions", "opgen",
      "pytest", "_pytest", "pluggy"};
  if (stdlib.count(package)) return "Python's standard module " + std::string(package);
  if (dependencies.count(package)) return "the module " + std::string(package) + " that opgen packages depend on";
  return "";
}

bool is_reserved_torch_namespace(std::string_view ns) {
  // PyTorch's own operator namespaces.
  static const std::set<std::string, std::less<>> taken = {
      "aten", "prim", "prims", "quantized", "_quantized", "c10d", "_c10d_functional", "inductor",
      "higher_order", "debugprims", "torch", "profiler", "cuda", "mkldnn", "xla", "torchvision"};
  return taken.count(ns) > 0;
}

std::string enumerator_name(std::string_view value) {
  return is_reserved_name(value) ? std::string(value) + "_" : std::string(value);
}

std::string enum_type_name(std::string_view attr_name) {
  std::string out;
  bool upper = true;
  for (char c : attr_name) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper && is_ascii_lower(c) ? static_cast<char>(c - 'a' + 'A') : c;
    upper = false;
  }
  return out;
}

std::string strides_name(std::string_view input) { return std::string(input) + "_strides"; }

std::string in_range_name(std::string_view input) { return std::string(input) + "_in_range"; }

std::string dims_name(std::string_view tensor) { return std::string(tensor) + "_dim"; }

std::string request_param(std::string_view output) { return "return_" + std::string(output); }

std::string torch_kernel_name(std::string_view op, bool lowered) {
  return std::string(op) + (lowered ? "__lowered" : "");
}

namespace {

// The suffix of a custom call's target and symbol: _ffi, _legacy_v<N>.
std::string api_suffix(int api_version) {
  return api_version == 4 ? "_ffi" : "_legacy_v" + std::to_string(api_version);
}

}  // namespace

std::string xla_target_name(std::string_view package, std::string_view op, int api_version) {
  return std::string(package) + "_" + std::string(op) + api_suffix(api_version);
}

std::string xla_handler_symbol(std::string_view package, std::string_view op, std::string_view platform,
                               int api_version) {
  return std::string(package) + "_" + std::string(op) + "_" + std::string(platform) + api_suffix(api_version);
}

std::string state_type_name(std::string_view platform) {
  return enum_type_name(platform) + "State";
}

std::string make_state_name(std::string_view platform) { return "make_" + std::string(platform) + "_state"; }

std::string state_field_name(std::string_view platform) { return std::string(platform) + "_state"; }

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

}  // namespace opgen::gen
