// Writes generated files into an output folder, safely:
// - only when their bytes change, so that a rebuild after an unrelated edit
//   recompiles nothing;
// - through a temporary file with an unpredictable name, created exclusively
//   beside the target and renamed over it, so that a reader (or an
//   interrupted run) never sees half a file and a planted symbolic link is
//   never written through; the next run removes those that a killed run left;
// - only inside the folder: a subfolder that is a symbolic link leading out
//   of it is an error, never a place to write;
// - one run at a time: the folder is locked for the whole run, so two
//   builds of one tree generating at once end with the folder complete;
// - removing only files that opgen itself wrote there on an earlier run, as
//   its manifest lists them, and that this run no longer writes;
// - one package per folder: the manifest names it (without a manifest, the
//   stamped opgen_package.cmake or python/NAME, include/NAME folders holding
//   stamped files do), and another package's run is refused (the two would
//   write the same package files and take each other's op files for stale).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "model/outputs.h"  // kManifestFileName

namespace opgen::gen {

enum class WriteResult { kUnchanged, kWritten, kFailed };

// Writes `contents` to `path` (creating its parent folders) unless the file
// already holds exactly these bytes. On failure, `error` says why.
WriteResult write_if_changed(const std::string& path, const std::string& contents, std::string& error);

// The paths a manifest lists: the lines that are not comments.
std::vector<std::string> manifest_entries(const std::string& text);

// The package a manifest names, or "" (a manifest of an opgen that named none).
std::string manifest_package(const std::string& text);

class OutputFolder {
 public:
  // Creates `root` when needed, locks it (waiting, with a message on stderr,
  // while another run holds it), reads the manifest an earlier run left
  // (refusing one of a package other than `package`; with none, refusing a
  // folder whose stamped files show another package), and prepares the
  // folders of `planned` (paths relative to `root`). On failure `error()`
  // says why and nothing is written.
  OutputFolder(const std::string& root, const std::string& package, const std::vector<std::string>& planned);
  ~OutputFolder();
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;

  const std::string& error() const { return error_; }
  // True when the lock was held by another run and this one waited for it.
  bool waited() const { return waited_; }
  const std::string& root() const { return root_; }
  // The path shown for `relative`: the root joined with it.
  std::string shown(const std::string& relative) const;
  // The temporary files of a killed run that opening the folder removed
  // from the folders it writes into (as shown).
  const std::vector<std::string>& removed_temporaries() const { return removed_temporaries_; }

  // write_if_changed for a planned path (relative to the root).
  WriteResult write_if_changed(const std::string& relative, const std::string& contents, std::string& error);

  // Removes each file the earlier manifest lists that is not in `produced`
  // (relative paths), provided it is still a regular file inside the folder
  // that carries opgen's stamp. Returns the paths removed (as shown).
  std::vector<std::string> remove_stale(const std::set<std::string>& produced);

 private:
  std::string root_;
  std::string canonical_root_;
  int lock_fd_ = -1;
  bool waited_ = false;
  std::string error_;
  std::vector<std::string> previous_;  // the earlier run's manifest
  std::set<std::string> existing_;     // files of the planned folders, listed once up front
  std::vector<std::string> removed_temporaries_;
};

}  // namespace opgen::gen
