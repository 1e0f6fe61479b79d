// A file descriptor written whole: the renderer's pipe (rendering/) and the
// generated files (writing/) both write through it.
#pragma once

#include <string>

namespace opgen::gen {

// Writes all of `bytes` to `fd` (retrying short writes and EINTR); false on failure.
bool write_all(int fd, const std::string& bytes);

}  // namespace opgen::gen
