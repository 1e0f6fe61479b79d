// The grammar of an output dimension expression: integers and shape symbols
// joined by + - * / // and parentheses (`2*D`, `D/H`, `(N+1)*2`, `(N+7)//8`),
// read into the model's Expr tree. `/` must divide exactly, which the generated
// code checks at run time; `//` rounds down; a literal zero divisor is refused
// here. A literal is any integer of int64: a negated one (`-1`, and
// -9223372036854775808, whose digits alone do not fit) reads as one negative
// integer, any other unary minus as 0 - operand.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"

namespace opgen::gen {

// The tree of `text`, or nullptr with `error` saying what is wrong (the
// caller adds where).
std::shared_ptr<const Expr> parse_shape_expr(std::string_view text, std::string& error);

// A constraint's `text`: an expression (also with `%`), a comparison
// (== != < <= > >=) and another expression, or an expression, `in` and a list
// of integers (`Dh in [64, 128]`); nullopt with `error` when it is not one.
std::optional<Constraint> parse_constraint(std::string_view text, std::string& error);

// Every symbol `e` uses, in order (with repeats).
void expr_symbols(const Expr& e, std::vector<std::string>& out);

}  // namespace opgen::gen
