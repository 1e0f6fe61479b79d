#include "output_writer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace opgen {

namespace {

// The shared steps; `may_exist` and `make_parent` let a caller that knows
// the folder skip a failing open and a folder creation.
WriteResult write(const std::string& path, const std::string& contents, bool may_exist, bool make_parent,
                  std::string& error) {
  namespace fs = std::filesystem;
  if (may_exist) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream existing;
      existing << in.rdbuf();
      if (existing.str() == contents) return WriteResult::kUnchanged;
    }
  }
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (make_parent && !parent.empty()) fs::create_directories(parent, ec);
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

}  // namespace

WriteResult write_if_changed(const std::string& path, const std::string& contents, std::string& error) {
  return write(path, contents, true, true, error);
}

OutputFolder::OutputFolder(const std::string& root) : root_(root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  folders_.insert(fs::path(root).lexically_normal().string());
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string path = it->path().lexically_normal().string();
    if (it->is_directory(ec)) folders_.insert(path);
    else files_.insert(path);
  }
}

WriteResult OutputFolder::write_if_changed(const std::string& path, const std::string& contents,
                                           std::string& error) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  const bool have_parent = folders_.count(parent) > 0;
  const WriteResult r = write(path, contents, files_.count(path) > 0, !have_parent, error);
  if (r != WriteResult::kFailed) {
    files_.insert(path);
    folders_.insert(parent);
  }
  return r;
}

}  // namespace opgen
