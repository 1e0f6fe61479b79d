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

void report(XlaCustomCallStatus* status, const char* target, const Status& s) {
  if (s.ok()) return;
  const std::string message = std::string(target) + ": " + s.message();
  SetFailureFn setter = failure_setter();
  if (status != nullptr && setter != nullptr) {
    setter(status, message.data(), message.size());
    return;
  }
  std::fprintf(stderr,
               "opgen: error: %s\nopgen: the kernel was not run; the call's outputs hold poison (every byte "
               "0xFF: NaN in floating types, -1 in integers) where the descriptor gave their sizes; %s\n",
               message.c_str(),
               status == nullptr
                   ? "api_version 1 gives a custom call no way to return an error (use 4)"
                   : "XLA's status setter is not exported in this process, so the error cannot "
                     "reach the framework (use api_version 4)");
  std::fflush(stderr);
}

}  // namespace opgen::xla_legacy
