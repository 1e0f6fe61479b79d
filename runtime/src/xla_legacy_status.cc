#include "opgen/xla_legacy_status.h"

#include <dlfcn.h>

#include <cstdio>
#include <string>

namespace opgen::xla_legacy {

SetFailureFn failure_setter() {
  static const SetFailureFn setter =
      reinterpret_cast<SetFailureFn>(dlsym(RTLD_DEFAULT, "XlaCustomCallStatusSetFailure"));
  return setter;
}

std::string outputs_text(const Outputs& outputs) {
  constexpr const char* kPoison = "poison (every byte 0xFF: NaN in floating types, -1 in integers)";
  if (outputs.poisoned == 0) {
    return "the call was refused before its outputs were bound: they are left as they are (whatever the "
           "buffers held before, not poison)";
  }
  if (outputs.poisoned >= outputs.results) {
    return std::string("the call's outputs hold ") + kPoison + " where the descriptor gave their sizes";
  }
  return "the first " + std::to_string(outputs.poisoned) + " of the call's " + std::to_string(outputs.results) +
         " outputs hold " + kPoison + " where the descriptor gave their sizes; the others are left as they are";
}

void report(XlaCustomCallStatus* status, const char* target, const Status& s, const Outputs& outputs) {
  if (s.ok()) return;
  const std::string message = std::string(target) + ": " + s.message();
  SetFailureFn setter = failure_setter();
  if (status != nullptr && setter != nullptr) {
    setter(status, message.data(), message.size());
    return;
  }
  std::fprintf(stderr, "opgen: error: %s\nopgen: the kernel was not run; %s; %s\n", message.c_str(),
               outputs_text(outputs).c_str(),
               status == nullptr
                   ? "api_version 1 gives a custom call no way to return an error (use 4)"
                   : "XLA's status setter is not exported in this process, so the error cannot "
                     "reach the framework (use api_version 4)");
  std::fflush(stderr);
}

}  // namespace opgen::xla_legacy
