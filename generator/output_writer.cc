#include "output_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string_view>
#include <system_error>

namespace opgen::gen {
namespace fs = std::filesystem;

namespace {

// The permissions of a new file: what a plain open would give (0666 less the
// umask). mkstemp creates 0600. Read once, before any worker forks.
mode_t new_file_mode() {
  static const mode_t mode = [] {
    const mode_t mask = ::umask(022);
    ::umask(mask);
    return static_cast<mode_t>(0666 & ~mask);
  }();
  return mode;
}

std::string errno_text() { return std::strerror(errno); }

// replace()'s temporary files are ".NAME" + kTemporaryMark + six letters or
// digits (mkstemp's XXXXXX).
constexpr std::string_view kTemporaryMark = ".opgen-";
constexpr size_t kTemporaryRandom = 6;

bool is_temporary_name(const std::string& name) {
  if (name.size() < 2 + kTemporaryMark.size() + kTemporaryRandom || name[0] != '.') return false;
  const size_t mark = name.size() - kTemporaryRandom - kTemporaryMark.size();
  return name.compare(mark, kTemporaryMark.size(), kTemporaryMark) == 0 &&
         std::all_of(name.end() - kTemporaryRandom, name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
         });
}

// Whether `path` is a regular file (not a link to one) holding exactly `contents`.
bool holds(const std::string& path, const std::string& contents) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != contents.size()) {
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream existing;
  existing << in.rdbuf();
  return in && existing.str() == contents;
}

// Writes beside the target under a fresh name (mkstemp: O_CREAT | O_EXCL, so
// nothing planted there is followed or reused) and renames it over the target.
WriteResult replace(const std::string& path, const std::string& contents, std::string& error) {
  const fs::path target(path);
  std::string tmp = (target.parent_path() / ("." + target.filename().string() + std::string(kTemporaryMark) +
                                             std::string(kTemporaryRandom, 'X'))).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    error = "cannot create a temporary file beside " + path + ": " + errno_text();
    return WriteResult::kFailed;
  }
  const bool written = ::fchmod(fd, new_file_mode()) == 0 && write_all(fd, contents);
  const std::string why = errno_text();
  if (::close(fd) != 0 || !written) {
    error = "cannot write " + tmp + ": " + why;
    ::unlink(tmp.c_str());
    return WriteResult::kFailed;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot replace " + path + ": " + errno_text();
    ::unlink(tmp.c_str());
    return WriteResult::kFailed;
  }
  return WriteResult::kWritten;
}

// Whether `path` (canonical) is `root` (canonical) or lies under it.
bool inside(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

// A manifest entry that can only name a file under the folder: relative,
// normal, without '..'.
bool plain_relative(const std::string& entry) {
  const fs::path p(entry);
  if (entry.empty() || p.is_absolute() || p.lexically_normal().generic_string() != entry) return false;
  for (const fs::path& part : p) {
    if (part == ".." || part == ".") return false;
  }
  return true;
}

}  // namespace

bool write_all(int fd, const std::string& bytes) {
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

WriteResult write_if_changed(const std::string& path, const std::string& contents, std::string& error) {
  if (holds(path, contents)) return WriteResult::kUnchanged;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) {
    error = "cannot create folder " + parent.string() + ": " + ec.message();
    return WriteResult::kFailed;
  }
  return replace(path, contents, error);
}

std::vector<std::string> manifest_entries(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] != '#') out.push_back(line);
  }
  return out;
}

std::string manifest_package(const std::string& text) {
  const std::string key = "# package: ";
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(key, 0) == 0) return line.substr(key.size());
  }
  return "";
}

OutputFolder::OutputFolder(const std::string& root, const std::string& package, const std::vector<std::string>& planned)
    : root_(root) {
  new_file_mode();  // read the umask now, before any worker forks
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) {
    error_ = "cannot create the output folder " + root + ": " + ec.message();
    return;
  }
  lock_fd_ = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd_ < 0) {
    error_ = "cannot open the output folder " + root + ": " + errno_text();
    return;
  }
  // One run at a time per folder (flock on the folder itself: no lock file
  // to leave behind). The lock goes with the process.
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) {
      error_ = "cannot lock the output folder " + root + ": " + errno_text();
      return;
    }
    waited_ = true;
    std::cerr << "opgen: waiting for another opgen run to finish writing into " << root << "\n";
    while (::flock(lock_fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        error_ = "cannot lock the output folder " + root + ": " + errno_text();
        return;
      }
    }
  }
  canonical_root_ = fs::canonical(root, ec).string();
  if (ec) {
    error_ = "cannot resolve the output folder " + root + ": " + ec.message();
    return;
  }
  const std::string manifest = (fs::path(root) / kManifestFileName).string();
  struct stat st;
  if (::lstat(manifest.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    std::ifstream in(manifest, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    // A manifest that names no package (an older opgen's) is taken for this one's.
    const std::string owner = manifest_package(text.str());
    if (!owner.empty() && owner != package) {
      error_ = root + " holds the output of package '" + owner + "' (its " + kManifestFileName +
               " says so), and a folder holds one package: generate '" + package +
               "' into a folder of its own (or, if '" + owner + "' is gone, empty this one first)";
      return;
    }
    previous_ = manifest_entries(text.str());
  }
  // Each folder the plan writes into: made when missing, refused when it is
  // (or passes through) a link that leads out of the output folder, and
  // listed once, so that writing thousands of files costs no failed open.
  std::set<fs::path> folders;
  for (const std::string& p : planned) folders.insert(fs::path(p).parent_path());
  for (const fs::path& folder : folders) {
    fs::path at = root;
    for (const fs::path& part : folder) {
      at /= part;
      struct stat s;
      if (::lstat(at.c_str(), &s) != 0) {
        if (::mkdir(at.c_str(), 0777) != 0 && errno != EEXIST) {
          error_ = "cannot create folder " + at.string() + ": " + errno_text();
          return;
        }
      } else if (S_ISLNK(s.st_mode)) {
        const fs::path target = fs::canonical(at, ec);
        if (ec || !inside(target, canonical_root_) || !fs::is_directory(target, ec)) {
          error_ = at.string() + " is a symbolic link that leads out of the output folder " + root +
                   "; opgen writes only inside it (remove the link)";
          return;
        }
      } else if (!S_ISDIR(s.st_mode)) {
        error_ = at.string() + " is in the way of a folder that opgen writes into (it is not a folder)";
        return;
      }
    }
    for (const auto& entry : fs::directory_iterator(at, ec)) {
      const std::string name = entry.path().filename().string();
      const std::string relative = (folder / name).generic_string();
      // A temporary file of a run killed while it wrote (a worker of a killed
      // run dies with it): with the lock held, no other run is writing one.
      std::error_code type_ec;
      if (is_temporary_name(name) && fs::is_regular_file(entry.symlink_status(type_ec)) &&
          ::unlink(entry.path().c_str()) == 0) {
        removed_temporaries_.push_back(shown(relative));
        continue;
      }
      existing_.insert(relative);
    }
    if (ec) {
      error_ = "cannot list folder " + at.string() + ": " + ec.message();
      return;
    }
  }
}

OutputFolder::~OutputFolder() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string OutputFolder::shown(const std::string& relative) const {
  return (fs::path(root_) / relative).lexically_normal().string();
}

WriteResult OutputFolder::write_if_changed(const std::string& relative, const std::string& contents,
                                           std::string& error) {
  const std::string path = shown(relative);
  if (existing_.count(relative) && holds(path, contents)) return WriteResult::kUnchanged;
  return replace(path, contents, error);
}

std::vector<std::string> OutputFolder::remove_stale(const std::set<std::string>& produced) {
  std::vector<std::string> removed;
  for (const std::string& entry : previous_) {
    if (produced.count(entry) || entry == kManifestFileName || !plain_relative(entry)) continue;
    const std::string path = shown(entry);
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    std::error_code ec;
    const fs::path parent = fs::canonical(fs::path(path).parent_path(), ec);
    if (ec || !inside(parent, canonical_root_)) continue;
    // A file the user has since replaced with their own is theirs.
    std::ifstream in(path, std::ios::binary);
    std::string head(400, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    if (head.find("Generated by opgen") == std::string::npos) continue;
    if (::unlink(path.c_str()) == 0) removed.push_back(path);
  }
  return removed;
}

}  // namespace opgen::gen
