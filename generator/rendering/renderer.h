// Renders the Jinja2 templates in a process of the environment's own Python
// (`python -m opgen_render`, generator/python/opgen_render), so that opgen
// links no libpython and one build serves every Python, while the templates
// stay plain Jinja2. This file chooses the Python, starts it and hands it the
// model's facts (template_data.h) as JSON; the protocol is opgen_render's
// (__main__.py).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/model.h"

namespace opgen::gen {

class Renderer {
 public:
  // Starts the renderer, which loads Jinja2 and the templates while opgen
  // goes on (reading specs). Throws std::runtime_error when no Python can be
  // started; a Python without Jinja2 is reported by the first request.
  explicit Renderer(const std::string& templates_dir);
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  // Sends the model and reads the plan: every file that the package and its
  // ops produce (outputs.h), the manifest of them last, numbered from 0 to
  // file_count() - 1. `jobs`: the processes it may render in (packages of
  // fewer than 200 files render in one). Throws std::runtime_error with the
  // renderer's message.
  void plan(const Package& package, const std::vector<Op>& ops, size_t jobs);
  size_t file_count() const;
  // The path of planned file `index`, relative to the output folder.
  const std::string& path(size_t index) const;
  // The processes the renderer renders in.
  size_t workers() const;
  // The next file rendered, in no fixed order (several processes render
  // them): sets `index` to its place in the plan and returns its text. Call
  // it file_count() times. Throws std::runtime_error naming the template
  // when rendering fails.
  std::string next_file(size_t& index);

  // Templates that read string values (the skeletons of `opgen new` and
  // `opgen init`), in order.
  std::vector<std::string> render_each(const std::vector<std::string>& template_names,
                                       const std::vector<std::pair<std::string, std::string>>& values);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace opgen::gen
