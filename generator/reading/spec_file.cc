#include "reading/spec_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <utility>

#include "model/names.h"
#include "reading/read_spec.h"

namespace opgen::gen {
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

}  // namespace

bool SpecFile::read_text(const std::string& fs_path, std::string& text) {
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

std::optional<YAML::Node> SpecFile::load(const std::string& fs_path) {
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

std::vector<std::pair<std::string, YAML::Node>> SpecFile::entries(const YAML::Node& map, const std::string& what, const std::vector<std::string>& allowed) {
  std::vector<std::pair<std::string, YAML::Node>> out;
  std::set<std::string> seen;
  // Inside a flow mapping a comma ends a plain value, so `{doc: the weights,
  // in descending order}` reads as a key 'in descending order' with no value.
  // The entry before the key, to tell that case from a misspelt key.
  const bool flow = map.Style() == YAML::EmitterStyle::Flow;
  // (Only facts about it are kept: assigning a YAML::Node writes through to
  // the node it refers to.)
  std::string previous_name;
  bool previous_is_text = false;   // its value is a plain (unquoted) scalar
  bool previous_was_rest = false;  // the entry before was the rest of a value, reported
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first;
    const bool was_rest = previous_was_rest;
    previous_was_rest = false;
    if (!key.IsScalar()) {
      error(at(key), "keys of " + what + " must be plain names");
      previous_name.clear();
      previous_is_text = false;
      continue;
    }
    const std::string name = key.Scalar();
    const std::string before_name = std::exchange(previous_name, name);
    const bool follows_text = std::exchange(
        previous_is_text, it->second.IsDefined() && it->second.IsScalar() && it->second.Tag() == "?");
    if (!seen.insert(name).second) {
      error(at(key), "duplicate key '" + name + "' in " + what);
      continue;
    }
    if (!allowed.empty() &&
        std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      std::string message = "unknown key '" + name + "' in " + what;
      std::string fix = closest_match(name, allowed);
      // The rest of a value that a comma cut off: in a flow mapping, a key
      // that is no near miss of an allowed one and holds a space (no name
      // does), or has no value and follows a plain scalar (a doc) or another
      // such piece. A misspelt key keeps its did-you-mean.
      const bool has_space = name.find(' ') != std::string::npos;
      const bool rest_of_value =
          flow && fix.empty() && !before_name.empty() &&
          (has_space || (it->second.IsNull() && (follows_text || was_rest)));
      if (rest_of_value && was_rest) {
        // A third piece of the same value (`doc: a, b, c`): the error on the
        // second says how to fix them all.
        previous_was_rest = true;
        continue;
      }
      if (rest_of_value) {
        message += "; inside {...} a comma ends a value: ";
        if (follows_text && before_name == "doc") {
          message += "quote the doc (\"...\")";
        } else if (follows_text) {
          message += "quote the value of '" + before_name + "' (\"...\")";
        } else {
          message += "quote a value that holds one (\"...\")";
        }
        previous_was_rest = true;
      } else if (!fix.empty()) {
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

void SpecFile::require(const YAML::Node& map, const std::string& what, const std::vector<std::string>& required) {
  for (const std::string& key : required) {
    if (!map[key]) error(at(map), what + " is missing the required key '" + key + "'");
  }
}

std::optional<int64_t> SpecFile::integer(const YAML::Node& node, const std::string& what) {
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

std::optional<double> SpecFile::real(const YAML::Node& node, const std::string& what) {
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

std::optional<bool> SpecFile::boolean(const YAML::Node& node, const std::string& what) {
  if (node.IsScalar() && node.Tag() != "!") {
    if (node.Scalar() == "true") return true;
    if (node.Scalar() == "false") return false;
  }
  error(at(node), what + " must be true or false");
  return std::nullopt;
}

bool SpecFile::checked_snake_name(const std::string& s, const Location& where, const std::string& what,
                                  bool reserved_ok) {
  if (!is_snake_identifier(s)) {
    error(where, what + " '" + s +
                     "' is not a valid name: use lower case letters, digits and '_', "
                     "starting with a letter, with no '__' and no trailing '_'");
    return false;
  }
  if (!reserved_ok && is_reserved_name(s)) {
    error(where, what + " '" + s + "' is reserved in C++, Python or the generated code");
    return false;
  }
  return true;
}

}  // namespace opgen::gen
