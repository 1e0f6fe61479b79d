// What `opgen generate` writes: one line per file, naming the template that
// renders it and where it goes. Adding a target (a framework, an artifact)
// is one template and one line here. A fact of the package, beneath the
// stages: resolving refuses two ops that would write one file, rendering
// plans the files, writing keeps the manifest.
#pragma once

#include <string>
#include <vector>

namespace opgen::gen {

struct OutputFile {
  std::string template_name;  // under the templates folder
  std::string path;           // relative to the output folder
  std::string kind;  // what the package build does with it: one of file_kinds()
};

// A kind of generated file, by what the package build does with it:
// opgen_package.cmake lists the files of each kind (OPGEN_FILES_<NAME>, the
// kinds themselves in OPGEN_FILE_KINDS) for cmake/OpgenAddPackage.cmake.
struct FileKind {
  std::string name;
  std::string what;  // as opgen_package.cmake's comment says it
};
const std::vector<FileKind>& file_kinds();

// The file each run writes into its output folder, listing every other file
// it wrote there (paths relative to the folder, one per line after a stamp
// and a line `# package: NAME`).
inline constexpr const char* kManifestFileName = "opgen_manifest.txt";

// The manifest: every other file a run wrote, rendered last.
OutputFile manifest_output();

// The files of the whole package (their context: the package and every op).
std::vector<OutputFile> package_outputs(const std::string& package);

// The files of one op (their context: the package and the op), in the order
// they are rendered.
std::vector<OutputFile> op_outputs(const std::string& package, const std::string& op);

}  // namespace opgen::gen
