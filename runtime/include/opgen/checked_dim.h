// Output dimensions computed from shape symbols (`D/2`, `N*H`, `(N+7)//8`) without
// silent overflow. The generated checks spell a spec's expression with
// CheckedDim operands, so that it reads as written:
//
//   const opgen::CheckedDim d_ = opgen::CheckedDim(args.D) / 2;
//
// Each operation keeps the first failure in evaluation order: a result
// outside int64, a division by zero or a `/` that leaves a remainder (`/`
// divides exactly; `//`, floor_div, rounds down as Python's does). opgen's Python runtime evaluates the same
// expressions with the same rules, so every entry point agrees on them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "opgen/host_device.h"

namespace opgen {

// a // b: the quotient rounded down, as Python's `//` (C++'s `/` rounds toward
// zero). For the unchecked spellings of a spec's expressions (an index
// input's value range, which a body evaluates on the device); b != 0.
OPGEN_HD constexpr int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

class CheckedDim {
 public:
  enum class Failure { kNone, kOverflow, kInexact };

  constexpr CheckedDim(int64_t value) : value_(value) {}  // NOLINT: implicit, so `2 * d` reads as written

  constexpr bool ok() const { return failure_ == Failure::kNone; }
  constexpr Failure failure() const { return failure_; }
  constexpr int64_t value() const { return value_; }
  // For kInexact: the division that failed (a zero denominator included).
  constexpr int64_t numerator() const { return numerator_; }
  constexpr int64_t denominator() const { return denominator_; }

  friend constexpr CheckedDim operator+(CheckedDim a, CheckedDim b) {
    if (!a.ok()) return a;
    if (!b.ok()) return b;
    int64_t r = 0;
    return __builtin_add_overflow(a.value_, b.value_, &r) ? overflow() : CheckedDim(r);
  }
  friend constexpr CheckedDim operator-(CheckedDim a, CheckedDim b) {
    if (!a.ok()) return a;
    if (!b.ok()) return b;
    int64_t r = 0;
    return __builtin_sub_overflow(a.value_, b.value_, &r) ? overflow() : CheckedDim(r);
  }
  friend constexpr CheckedDim operator*(CheckedDim a, CheckedDim b) {
    if (!a.ok()) return a;
    if (!b.ok()) return b;
    int64_t r = 0;
    return __builtin_mul_overflow(a.value_, b.value_, &r) ? overflow() : CheckedDim(r);
  }
  friend constexpr CheckedDim operator/(CheckedDim a, CheckedDim b) {
    if (!a.ok()) return a;
    if (!b.ok()) return b;
    if (b.value_ == 0 || a.value_ % (b.value_ == -1 ? 1 : b.value_) != 0) return inexact(a.value_, b.value_);
    if (a.value_ == INT64_MIN && b.value_ == -1) return overflow();
    return CheckedDim(a.value_ / b.value_);
  }

  // The remainder of a / b with C++'s sign (of a); b == 0 fails as kInexact.
  friend constexpr CheckedDim operator%(CheckedDim a, CheckedDim b) {
    if (!a.ok()) return a;
    if (!b.ok()) return b;
    if (b.value_ == 0) return inexact(a.value_, 0);
    return CheckedDim(b.value_ == -1 ? 0 : a.value_ % b.value_);
  }

  // a // b, rounded down; b == 0 fails as kInexact, INT64_MIN // -1 overflows.
  friend constexpr CheckedDim floor_div(CheckedDim a, CheckedDim b) {
    if (!a.ok()) return a;
    if (!b.ok()) return b;
    if (b.value_ == 0) return inexact(a.value_, 0);
    if (a.value_ == INT64_MIN && b.value_ == -1) return overflow();
    return CheckedDim(opgen::floor_div(a.value_, b.value_));
  }

 private:
  static constexpr CheckedDim overflow() {
    CheckedDim r(0);
    r.failure_ = Failure::kOverflow;
    return r;
  }
  static constexpr CheckedDim inexact(int64_t numerator, int64_t denominator) {
    CheckedDim r(0);
    r.failure_ = Failure::kInexact;
    r.numerator_ = numerator;
    r.denominator_ = denominator;
    return r;
  }

  int64_t value_ = 0;
  Failure failure_ = Failure::kNone;
  int64_t numerator_ = 0, denominator_ = 0;
};

// Visible to a qualified call, `opgen::floor_div(opgen::CheckedDim(args.N), 8)`,
// as the generated checks spell it.
constexpr CheckedDim floor_div(CheckedDim a, CheckedDim b);

// A constraint of a spec (`H % KVH == 0`, `R <= head_size`), over values
// that are compared only where both were computed: a failed computation
// fails the constraint.
enum class Compare { kEq, kNe, kLt, kLe, kGt, kGe };

constexpr bool holds(CheckedDim a, Compare c, CheckedDim b) {
  if (!a.ok() || !b.ok()) return false;
  switch (c) {
    case Compare::kEq: return a.value() == b.value();
    case Compare::kNe: return a.value() != b.value();
    case Compare::kLt: return a.value() < b.value();
    case Compare::kLe: return a.value() <= b.value();
    case Compare::kGt: return a.value() > b.value();
    case Compare::kGe: return a.value() >= b.value();
  }
  return false;
}

// `Dh in [64, 128, 256]`.
constexpr bool holds_in(CheckedDim a, std::initializer_list<int64_t> set) {
  if (!a.ok()) return false;
  for (int64_t v : set) {
    if (a.value() == v) return true;
  }
  return false;
}

}  // namespace opgen
