// Renders and writes the planned files, in several processes when there
// are enough files to repay a fork: rendering is Python (one interpreter, one
// GIL), so processes, not threads, are what use more than one core.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "output_writer.h"
#include "renderer.h"

namespace opgen::gen {

struct FileOutcome {
  std::string path;  // as written: the output folder joined with the planned path
  bool written = false;  // false: the bytes on disk were already these
};

// The processes to use by default: the CPUs this process may run on, at most 8.
size_t default_workers();

// Renders every planned file of `renderer` and writes it under `output`
// (opened, locked and listed before the workers fork) when its bytes change. Workers take the next file not yet taken, one at a
// time, in plan order; the outcomes come back in plan order. Returns "" or
// the first error (a render or write failure in any worker).
std::string render_and_write(Renderer& renderer, OutputFolder& output, size_t workers,
                             std::vector<FileOutcome>& outcomes);

}  // namespace opgen::gen
