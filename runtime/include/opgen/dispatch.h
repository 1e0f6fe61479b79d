// Runtime dtype dispatch. Each op's header lists the Args instantiations it
// is built for, in one order:
//
//   using Instantiations = opgen::TypeList<Args<opgen::f16>, Args<float>>;
//
// A binding finds the position of each type variable's dtype among the ones
// the spec allows (index_of), combines them into an index into that list
// (the first type variable varies slowest), and visit_args calls the generic
// body with an Args of the selected type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "opgen/status.h"

namespace opgen {

template <typename... A>
struct TypeList {
  static constexpr size_t size = sizeof...(A);
};

// The position of `value` in `allowed`, or -1. The list takes the value's
// type (it is not deduced from the list), so `index_of(code_u8, {0, 3})` works.
template <typename T>
constexpr int index_of(const T& value, std::initializer_list<std::decay_t<T>> allowed) {
  int i = 0;
  for (const auto& a : allowed) {
    if (a == value) return i;
    ++i;
  }
  return -1;
}

namespace detail {
template <typename A, typename R, typename Body>
R call_with_args(Body& body) {
  A args{};
  return body(args);
}
}  // namespace detail

// Calls `body(args)` with a value-initialised `args` of the `index`-th type
// of the list and returns its result; `otherwise()` when there is no such
// type. One indirect call, whatever the number of instantiations.
template <typename... A, typename Body, typename Otherwise>
decltype(auto) visit_args(TypeList<A...>, int index, Body&& body, Otherwise&& otherwise) {
  using R = decltype(otherwise());
  using B = std::remove_reference_t<Body>;
  if (index < 0 || static_cast<size_t>(index) >= sizeof...(A)) return otherwise();
  static constexpr R (*kTable[])(B&) = {&detail::call_with_args<A, R, B>...};
  return kTable[index](body);
}

// Calls f(std::integral_constant<int64_t, V>{}) for the V among Values that
// equals `value`, and returns what f returns: a size that a spec restricts to a
// few values (`Dh in [64, 128, 256]`) reaches a body as a template argument.
// The generated with_<symbol> helpers call it. A value that is none of them
// (the bindings' constraint checks rule it out) is an Internal error naming
// `what`, never a silent fall-through.
template <int64_t... Values, typename F>
Status with_one_of(const char* what, int64_t value, F&& f) {
  Status out;
  const bool found = ((value == Values ? ((void)(out = f(std::integral_constant<int64_t, Values>{})), true) : false) || ...);
  if (!found) return Status::Internal(std::string(what) + " = " + std::to_string(value) + " is none of the values the spec allows");
  return out;
}

}  // namespace opgen
