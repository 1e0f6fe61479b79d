// The one routine that every entry point which runs a body goes through:
// bind the call with the op's rules (`<op>_rules.h`, over whatever Source
// the framework gives), then run the instantiation the call selects on the
// platform. The typed XLA FFI, the legacy shims, the PyTorch kernels and the
// eager PyTorch route (opgen/torch_eager.h) differ only in their Source and
// in how they report the Status this returns.
#pragma once

#include <cstddef>

#include "opgen/binder.h"
#include "opgen/dispatch.h"
#include "opgen/status.h"

namespace opgen {

// What becomes of the outputs when the call fails after they were bound:
// kept as they are, or filled with opgen's poison byte (a legacy custom call,
// whose failure XLA may not see, so that no stale buffer passes for a result).
enum class OnFailure : bool { kKeep, kPoison };

// Binds the call `b` reads with the rules of `Rules`, then has the framework
// allocate what it allocates (Binder::allocate: only once every rule has
// passed, so that a refused call holds no memory), and runs its body on
// `platform` (opgen/platform.h), after copying an input to the output that
// updates it where the two are different buffers. A call of no elements runs
// nothing. After a failure, b.ok() tells a refusal by the rules or an
// allocation's failure (false) from a failure of the platform or the body
// (true). With OnFailure::kPoison, `*poisoned` (where given) is the number of
// outputs a failure poisoned: those bound when it came, the first ones.
template <typename Rules, typename Platform>
Status run_call(Binder& b, const Platform& platform, OnFailure on_failure = OnFailure::kKeep,
                size_t* poisoned = nullptr) {
  if (poisoned != nullptr) *poisoned = 0;
  const int instantiation = Rules::select(b);
  if (!b.ok()) return b.status();
  return visit_args(
      typename Rules::Instantiations{}, instantiation,
      [&](auto& args) -> Status {
        Rules::bind(b, args);
        b.allocate();
        Status s = b.status();
        if (s.ok() && !b.empty()) {
          for (size_t i = 0; s.ok() && i < b.copy_count(); ++i) {
            s = platform.copy(b.copy(i).dst, b.copy(i).src, b.copy(i).bytes);
          }
          if (s.ok()) s = platform.run(args);
        }
        if (!s.ok() && on_failure == OnFailure::kPoison) {
          for (size_t i = 0; i < b.output_count(); ++i) {
            if (b.output_data(i) == nullptr) continue;  // left out with its optional input, or not asked for
            platform.poison(b.output_data(i), b.output_bytes(i));
            if (poisoned != nullptr) ++*poisoned;
          }
        }
        return s;
      },
      [] { return Status::Internal("no instantiation selected"); });
}

}  // namespace opgen
