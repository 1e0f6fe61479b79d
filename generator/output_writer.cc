#include "output_writer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace opgen {

WriteResult write_if_changed(const std::string& path, const std::string& contents,
                             std::string& error) {
  namespace fs = std::filesystem;
  {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream existing;
      existing << in.rdbuf();
      if (existing.str() == contents) return WriteResult::kUnchanged;
    }
  }
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) {
    error = "cannot create folder " + parent.string() + ": " + ec.message();
    return WriteResult::kFailed;
  }
  // Write beside the target and rename, so that a reader (or an interrupted
  // run) never sees half a file.
  const std::string tmp = path + ".opgen-tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << contents;
    if (!out.flush()) {
      error = "cannot write " + tmp;
      return WriteResult::kFailed;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    error = "cannot replace " + path + ": " + ec.message();
    fs::remove(tmp, ec);
    return WriteResult::kFailed;
  }
  return WriteResult::kWritten;
}

}  // namespace opgen
