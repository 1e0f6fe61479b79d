// Located diagnostics: every message a spec earns carries FILE:LINE:COL, and a
// run collects all of them before it reports, so one `opgen check` shows every
// mistake in every spec.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace opgen::gen {

// A position in a spec file; line and column count from 1. line 0 means the
// whole file (an error that no single key can be blamed for).
struct Location {
  std::string file;
  int line = 0;
  int column = 0;
};

struct Diagnostic {
  enum class Severity { kError, kWarning };
  Severity severity;
  Location where;
  std::string message;
};

class Diagnostics {
 public:
  void error(const Location& where, std::string message);
  void warning(const Location& where, std::string message);
  // Appends another collection's diagnostics, in their order.
  void append(const Diagnostics& other);

  bool has_errors() const { return error_count_ > 0; }
  int error_count() const { return error_count_; }
  const std::vector<Diagnostic>& all() const { return all_; }

  // Prints `FILE:LINE:COL: error: MESSAGE`, one line per diagnostic, in the
  // order they were found.
  void print(std::ostream& out) const;

 private:
  std::vector<Diagnostic> all_;
  int error_count_ = 0;
};

std::string format(const Diagnostic& d);

}  // namespace opgen::gen
