#include "system/install_prefix.h"

namespace opgen::gen {

std::filesystem::path install_prefix() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe.parent_path().parent_path();
}

}  // namespace opgen::gen
