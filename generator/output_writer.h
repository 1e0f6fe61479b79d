// Writes generated files only when their bytes change, so that a rebuild
// after an unrelated edit recompiles nothing.
#pragma once

#include <set>
#include <string>

namespace opgen {

enum class WriteResult { kUnchanged, kWritten, kFailed };

// Creates parent folders as needed. On failure, `error` says why.
WriteResult write_if_changed(const std::string& path, const std::string& contents,
                             std::string& error);

// An output folder whose files and subfolders are listed once up front, so
// that writing thousands of files into it costs no failed open of a file
// that is not there and no folder creation that is not needed, and so that
// the files an earlier run left are known without listing it again.
class OutputFolder {
 public:
  explicit OutputFolder(const std::string& root);
  const std::string& root() const { return root_; }
  // write_if_changed, for a path under the root.
  WriteResult write_if_changed(const std::string& path, const std::string& contents, std::string& error);
  // The files listed up front (lexically normal paths), and those this
  // object has written since.
  const std::set<std::string>& files() const { return files_; }

 private:
  std::string root_;
  std::set<std::string> files_, folders_;
};

}  // namespace opgen
