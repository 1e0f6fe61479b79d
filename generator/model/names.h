// Rules for the names in a spec. Names become C++ identifiers, Python
// identifiers and parts of XLA target names, so they are checked against all
// three languages before anything is emitted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace opgen::gen {

// ASCII classes, whatever the C locale is: spec names are ASCII.
inline bool is_ascii_lower(char c) { return c >= 'a' && c <= 'z'; }
inline bool is_ascii_upper(char c) { return c >= 'A' && c <= 'Z'; }
inline bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }

// snake_case: op, tensor and attribute names.
bool is_snake_identifier(std::string_view s);
// Shape symbols may also use capitals (N, D, BlockSize).
bool is_symbol_identifier(std::string_view s);
// C++ or Python keyword, or a name the generated code itself uses.
bool is_reserved_name(std::string_view s);

// What a Python package of this name would hide from every importer on the
// path ("Python's standard module json"), or "" when it hides nothing.
std::string shadowed_module(std::string_view package);

// A torch.ops namespace that PyTorch itself uses (aten, prims, ...).
bool is_reserved_torch_namespace(std::string_view ns);

// The C++ type name of an enum attribute: its name in CamelCase
// (`activation_kind` -> `ActivationKind`).
std::string enum_type_name(std::string_view attr_name);

// The C++ enumerator of an enum attribute's value: the value, with a
// trailing '_' where opgen reserves it (a C++ keyword or a macro: vLLM's
// `auto` becomes `auto_`), which no spec name has.
std::string enumerator_name(std::string_view value);

// The candidate closest to `word` by edit distance, or "" when none is close
// enough to be a likely fix.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace opgen::gen
