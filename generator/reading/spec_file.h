// One spec file as the reader sees it: its YAML loaded (a regular file of
// bounded size, one document, a mapping) and wrapped in located, typed
// accessors that report every problem to Diagnostics, with FILE:LINE:COL,
// instead of throwing, so that the reader goes on and one run reports all.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/diagnostics.h"

namespace opgen::gen {

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

  // Loads the document; reports a YAML syntax error at its position.
  std::optional<YAML::Node> load(const std::string& fs_path);

  // The entries of a mapping, in document order, with every key checked
  // against `allowed`. Duplicate and unknown keys are reported (with a likely
  // fix where one is close); their values are skipped.
  std::vector<std::pair<std::string, YAML::Node>> entries(const YAML::Node& map, const std::string& what, const std::vector<std::string>& allowed);

  // Reports each key of `required` that `map` lacks.
  void require(const YAML::Node& map, const std::string& what, const std::vector<std::string>& required);

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
  std::optional<int64_t> integer(const YAML::Node& node, const std::string& what);

  std::optional<double> real(const YAML::Node& node, const std::string& what);

  std::optional<bool> boolean(const YAML::Node& node, const std::string& what);

  // `reserved_ok`: a name opgen reserves (a keyword, a macro) is taken too,
  // for a text that becomes no identifier as it is (an enum's value).
  std::optional<std::string> snake_name(const YAML::Node& node, const std::string& what, bool reserved_ok = false) {
    std::optional<std::string> s = string(node, what);
    if (!s) return std::nullopt;
    return checked_snake_name(*s, at(node), what, reserved_ok) ? s : std::nullopt;
  }

  bool checked_snake_name(const std::string& s, const Location& where, const std::string& what,
                          bool reserved_ok = false);

 private:
  // The file's bytes. Only a regular file of at most kMaxSpecBytes is read:
  // a device (/dev/zero), a pipe or a runaway file is refused before it can
  // block opgen or fill its memory.
  bool read_text(const std::string& fs_path, std::string& text);

  std::string path_;
  Diagnostics& diags_;
};

}  // namespace opgen::gen
