// Renders the Jinja2 templates through an embedded Python interpreter
// (pybind11), so that opgen stays one command while the templates stay plain
// Jinja2. The Python it runs is generator/python/opgen_render (installed
// beside the templates); this file only starts it and hands it the model's
// facts (template_data.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model.h"

namespace opgen::gen {

class Renderer {
 public:
  // Starts the interpreter and loads Jinja2 and opgen_render; throws
  // std::runtime_error with a message that says how to fix the environment
  // when Jinja2 is missing.
  explicit Renderer(const std::string& templates_dir);
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  // Plans every file that the package and its ops produce (outputs.h), and
  // last the manifest of them: builds every template's context and loads
  // every template once, so that render() is all that is left (and may run
  // in forked workers). Files are numbered from 0 to file_count() - 1.
  void plan(const Package& package, const std::vector<Op>& ops);
  size_t file_count() const;
  // The path of planned file `index`, relative to the output folder.
  const std::string& path(size_t index) const;
  // File `index` of the plan. Throws std::runtime_error naming the template
  // when rendering fails.
  std::string render(size_t index);

  // One template with string values (the skeletons of `opgen new`).
  std::string render_one(const std::string& template_name,
                         const std::vector<std::pair<std::string, std::string>>& values);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace opgen::gen
