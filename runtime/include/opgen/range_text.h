// A range as the spec states it and every message says it: ">= 0.0", "> 0",
// "<= 8", "in [1, 8]", "in (0.0, 1.0]", "in [0, S)" (of an attribute's
// values, of an index input's). The runtime's messages take it
// (attr_out_of_range in shape_check.h); the generator makes it with this
// function for the rules, the docs and the Python description (model.cc's
// range_text and values_range_text), so that every place says a range the
// same way.
#pragma once

#include <string>

namespace opgen {

// `min`, `max`: each bound's text (number_text of a number, or an
// expression as the spec writes it), "" where the range has none; "" when
// it has neither.
inline std::string range_text(const std::string& min, bool min_exclusive, const std::string& max, bool max_exclusive) {
  if (!min.empty() && !max.empty()) {
    return "in " + std::string(min_exclusive ? "(" : "[") + min + ", " + max + (max_exclusive ? ")" : "]");
  }
  if (!min.empty()) return (min_exclusive ? "> " : ">= ") + min;
  if (!max.empty()) return (max_exclusive ? "< " : "<= ") + max;
  return "";
}

}  // namespace opgen
