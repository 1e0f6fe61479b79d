// What lies between spec files, once each has been read on its own: the
// checks `opgen check` and `opgen generate` run over the whole set.
#pragma once

#include <vector>

#include "model/diagnostics.h"
#include "model/model.h"

namespace opgen::gen {

// An op named twice is kept once (its first file's) with an error at the
// second; then each backward against its forward (read_backward.h), no op
// named like a package, no two ops writing one file, and, where `generating`,
// exactly one package.yaml and at least one op. `ops` holds each op once on return.
void check_across_files(std::vector<Op>& ops, const std::vector<Package>& packages, bool generating,
                        const std::string& first_spec, Diagnostics& diags);

}  // namespace opgen::gen
