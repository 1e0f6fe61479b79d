#include "opgen/xla_targets.h"

namespace opgen::xla {
namespace {

// Built on first use, so that it exists whatever the order in which the
// module's static objects are made.
std::vector<const OpTargets*>& ops() {
  static std::vector<const OpTargets*> list;
  return list;
}

}  // namespace

Registration::Registration(const OpTargets& op) { ops().push_back(&op); }

const std::vector<const OpTargets*>& registered() { return ops(); }

}  // namespace opgen::xla
