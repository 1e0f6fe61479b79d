// Reporting failures from legacy (api_version 1, 2, 3) custom calls.
//
// XLA's status setter, XlaCustomCallStatusSetFailure, lives inside XLA and is
// not exported by jaxlib or torch_xla wheels (checked: jaxlib 0.10.2,
// torch_xla 2.9.0), so an extension cannot link against it. opgen looks it up
// in the process at run time; where it is found, a failure becomes an XLA
// error status that the framework raises. Where it is not (and always for
// api_version 1, which has no status argument) the failure is printed to
// stderr, and the generated shim fills the outputs with poison (opgen/platform.h)
// so that the caller never reads stale memory, except where the call is
// refused before its outputs are bound (the report says so). The typed FFI
// (api_version 4) has none of these limits: prefer it.
#pragma once

#include <cstddef>
#include <string>

#include "opgen/status.h"

extern "C" {
typedef struct XlaCustomCallStatus_ XlaCustomCallStatus;
}

namespace opgen::xla_legacy {

using SetFailureFn = void (*)(XlaCustomCallStatus*, const char* message, size_t message_len);

// The setter found in the process, or nullptr.
SetFailureFn failure_setter();

// What a failed call left in its outputs, for the message on stderr: the
// first `poisoned` of its `results` outputs hold poison; the others (all of
// them where the call was refused before its outputs were bound) are left as
// they are.
struct Outputs {
  size_t poisoned = 0;
  size_t results = 0;
};

// Reports `s` (when it is an error) for custom-call `target`: through
// `status` when it is non-null and a setter is known, else on stderr, saying
// what `outputs` hold.
void report(XlaCustomCallStatus* status, const char* target, const Status& s, const Outputs& outputs);

// The line of that report on what the outputs hold.
std::string outputs_text(const Outputs& outputs);

}  // namespace opgen::xla_legacy
