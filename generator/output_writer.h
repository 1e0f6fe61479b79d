// Writes generated files only when their bytes change, so that a rebuild
// after an unrelated edit recompiles nothing.
#pragma once

#include <string>

namespace opgen {

enum class WriteResult { kUnchanged, kWritten, kFailed };

// Creates parent folders as needed. On failure, `error` says why.
WriteResult write_if_changed(const std::string& path, const std::string& contents,
                             std::string& error);

}  // namespace opgen
