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

// The names the generated code derives from spec names. This is their one
// home: resolve.cc refuses a spec name that meets one of them, and the
// renderer gets each as a fact (rendering/template_data.cc), so that neither
// the templates, opgen_render nor the Python runtime spells them again.

// Args::<input>_strides: a rows or strided input's strides.
std::string strides_name(std::string_view input);
// Args::<input>_in_range: the range check of an input with a value range.
std::string in_range_name(std::string_view input);
// Args::<tensor>_dim: an output's or workspace's dimensions.
std::string dims_name(std::string_view tensor);
// return_<output>: the keyword that asks for an output on request (the
// wrappers' and the torch schema's parameter).
std::string request_param(std::string_view output);
// The name the PyTorch kernels register: the op's, or <op>__lowered where
// the stable ABI cannot carry its attributes (Op::torch_lowered).
std::string torch_kernel_name(std::string_view op, bool lowered);
// The XLA custom call target of api_version `api_version` (4: the typed
// FFI): <package>_<op>_ffi, <package>_<op>_legacy_v<N>.
std::string xla_target_name(std::string_view package, std::string_view op, int api_version);
// The C++ symbol of its handler on `platform` (cuda, cpu):
// <package>_<op>_<platform>_ffi, <package>_<op>_<platform>_legacy_v<N>.
std::string xla_handler_symbol(std::string_view package, std::string_view op, std::string_view platform,
                               int api_version);
// The C++ names of an op's state on `platform` (cuda, cpu; `state:`): the
// type the body defines (CudaState), the function that makes it
// (make_cuda_state) and the field of Args that holds it (cuda_state).
std::string state_type_name(std::string_view platform);
std::string make_state_name(std::string_view platform);
std::string state_field_name(std::string_view platform);

// The candidate closest to `word` by edit distance, or "" when none is close
// enough to be a likely fix.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace opgen::gen
