#include "model/diagnostics.h"

namespace opgen::gen {

void Diagnostics::error(const Location& where, std::string message) {
  all_.push_back({Diagnostic::Severity::kError, where, std::move(message)});
  ++error_count_;
}

void Diagnostics::warning(const Location& where, std::string message) {
  all_.push_back({Diagnostic::Severity::kWarning, where, std::move(message)});
}

std::string format(const Diagnostic& d) {
  std::string out = d.where.file;
  if (d.where.line > 0) {
    out += ":" + std::to_string(d.where.line) + ":" + std::to_string(d.where.column);
  }
  out += d.severity == Diagnostic::Severity::kError ? ": error: " : ": warning: ";
  out += d.message;
  return out;
}

void Diagnostics::append(const Diagnostics& other) {
  all_.insert(all_.end(), other.all_.begin(), other.all_.end());
  error_count_ += other.error_count_;
}

void Diagnostics::print(std::ostream& out) const {
  for (const Diagnostic& d : all_) out << format(d) << "\n";
}

}  // namespace opgen::gen
