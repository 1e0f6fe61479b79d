// Where the running opgen lies: the prefix above its bin/ folder, under which
// an installed opgen finds its files (share/opgen/..., lib/cmake/opgen; in the
// wheel, site-packages/opgen), and from which it looks for its virtualenv.
#pragma once

#include <filesystem>

namespace opgen::gen {

// <prefix> of <prefix>/bin/opgen, or an empty path when the executable's own
// path cannot be read.
std::filesystem::path install_prefix();

}  // namespace opgen::gen
