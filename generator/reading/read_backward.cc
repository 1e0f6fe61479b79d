// `backward:` as the spec writes it (read_backward.h); resolving/resolve_backward.cc checks it.
#include "reading/read_backward.h"

namespace opgen::gen {

std::optional<Backward> read_backward(SpecFile& f, const YAML::Node& node) {
  if (!f.expect_map(node, "'backward'")) return std::nullopt;
  Backward b;
  b.where = f.at(node);
  bool ok = true;
  f.require(node, "'backward'", {"op", "inputs", "gradients"});
  for (const auto& [key, value] :
       f.entries(node, "'backward'", {"op", "inputs", "gradients", "no_gradient", "unused"})) {
    if (key == "op") {
      std::optional<std::string> name = f.snake_name(value, "backward op name");
      if (name) b.op = *name;
      ok = ok && name.has_value();
      b.where = f.at(value);
    } else if (key == "inputs") {
      if (!f.expect_sequence(value, "'backward: inputs'")) {
        ok = false;
        continue;
      }
      for (const YAML::Node& item : value) {
        std::optional<std::string> text = f.string(item, "a backward input");
        if (!text) {
          ok = false;
          continue;
        }
        BackwardArg arg;
        arg.where = f.at(item);
        std::string name = *text;
        if (name.size() > 6 && name.rfind("grad(", 0) == 0 && name.back() == ')') {
          arg.kind = BackwardArg::Kind::kCotangent;
          name = name.substr(5, name.size() - 6);
        }
        arg.name = name;
        b.inputs.push_back(arg);
      }
    } else if (key == "gradients") {
      if (!f.expect_map(value, "'backward: gradients'")) {
        ok = false;
        continue;
      }
      for (auto it = value.begin(); it != value.end(); ++it) {
        std::optional<std::string> out = f.snake_name(it->first, "a backward output");
        if (!out) {
          ok = false;
          continue;
        }
        // One input, or a list of the inputs that all get this gradient (a
        // sum's operands: fused_add_rms_norm's x and residual).
        // (A Node of its own: `it->second` lives in a proxy that dies with
        // its full-expression, so a range-for over it reads a dead object.)
        const YAML::Node given = it->second;
        std::vector<YAML::Node> targets;
        if (given.IsSequence() && given.size() > 0) {
          for (const YAML::Node& item : given) targets.push_back(item);
        } else {
          targets.push_back(given);
        }
        for (const YAML::Node& target : targets) {
          std::optional<std::string> in = f.snake_name(target, "a forward input (or a list of them)");
          if (!in) {
            ok = false;
            continue;
          }
          b.gradients.emplace_back(*out, *in);
          b.gradient_where.push_back(f.at(target));
        }
      }
    } else if (key == "no_gradient" || key == "unused") {
      const bool unused = key == "unused";
      if (!f.expect_sequence(value, unused ? "'backward: unused'" : "'backward: no_gradient'")) {
        ok = false;
        continue;
      }
      for (const YAML::Node& item : value) {
        std::optional<std::string> name =
            f.snake_name(item, unused ? "a backward output the op discards" : "an input without a gradient");
        if (!name) {
          ok = false;
          continue;
        }
        (unused ? b.unused : b.no_gradient).push_back(*name);
        (unused ? b.unused_where : b.no_gradient_where).push_back(f.at(item));
      }
    }
  }
  if (!ok) return std::nullopt;
  return b;
}

}  // namespace opgen::gen
