#include "reading/shape_expr.h"

#include <charconv>
#include <cstdint>
#include <limits>
#include <system_error>

#include "model/names.h"

namespace opgen::gen {
namespace {

// Parses an output dimension expression: integers and shape symbols joined
// by + - * / // and parentheses, e.g. `2*D`, `D/H`, `(N+1)*2`, `(N+7)//8`; and
// constraints.
class ExprParser {
 public:
  // `mod`: '%' is an operator (in constraints).
  explicit ExprParser(std::string_view text, bool mod = false) : text_(text), mod_(mod) {}

  std::shared_ptr<const Expr> parse(std::string& error) {
    std::shared_ptr<const Expr> e = sum(error);
    return at_end(error) && e ? e : nullptr;
  }

  std::optional<Constraint> constraint(std::string& error) {
    Constraint c;
    c.lhs = sum(error);
    if (!c.lhs) return std::nullopt;
    skip_space();
    static const std::pair<const char*, Constraint::Kind> kOperators[] = {
        {"==", Constraint::Kind::kEq}, {"!=", Constraint::Kind::kNe}, {"<=", Constraint::Kind::kLe},
        {">=", Constraint::Kind::kGe}, {"<", Constraint::Kind::kLt},  {">", Constraint::Kind::kGt}};
    bool found = false;
    for (const auto& [spelling, kind] : kOperators) {
      if (text_.substr(pos_, std::string_view(spelling).size()) == spelling) {
        pos_ += std::string_view(spelling).size();
        c.kind = kind;
        found = true;
        break;
      }
    }
    if (!found && text_.substr(pos_, 2) == "in" && (pos_ + 2 == text_.size() || !is_name_char(text_[pos_ + 2]))) {
      pos_ += 2;
      c.kind = Constraint::Kind::kIn;
      if (!accept('[')) {
        error = "'in' takes a list of integers in brackets, such as [64, 128]";
        return std::nullopt;
      }
      do {
        // `-5` is a negative literal (-2^63 too); `-(5)` negates the integer in parentheses.
        const bool negative = accept('-');
        const bool negated = negative && !digit_next();
        std::shared_ptr<const Expr> v = negative && !negated ? literal(true, error) : atom(error);
        if (!v || v->kind != Expr::Kind::kInt) {
          if (error.empty()) error = "'in' takes a list of integers in brackets, such as [64, 128]";
          return std::nullopt;
        }
        if (negated && !negatable(v->value, error)) return std::nullopt;
        c.set.push_back(negated ? -v->value : v->value);
      } while (accept(','));
      if (!accept(']')) {
        error = "missing ']' after the list of 'in'";
        return std::nullopt;
      }
      if (!at_end(error)) return std::nullopt;
      return c;
    }
    if (!found) {
      error = pos_ < text_.size() ? "expected a comparison (== != < <= > >=) or 'in' at column " + std::to_string(pos_ + 1)
                                  : "a constraint compares two expressions (such as 'H % KVH == 0'), or names the "
                                    "values one may take ('Dh in [64, 128]')";
      return std::nullopt;
    }
    c.rhs = sum(error);
    if (!c.rhs || !at_end(error)) return std::nullopt;
    return c;
  }

 private:
  static bool is_name_char(char c) { return is_ascii_lower(c) || is_ascii_upper(c) || is_ascii_digit(c) || c == '_'; }
  bool at_end(std::string& error) {
    skip_space();
    if (!error.empty()) return false;
    if (pos_ != text_.size()) {
      error = "unexpected '" + std::string(text_.substr(pos_, 1)) + "' at column " + std::to_string(pos_ + 1) +
              " of the expression";
      return false;
    }
    return true;
  }
  void skip_space() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // Whether a digit comes next (after spaces).
  bool digit_next() {
    skip_space();
    return pos_ < text_.size() && is_ascii_digit(text_[pos_]);
  }
  // An integer literal at a digit, negated after a unary minus: every one
  // whose value fits int64, -9223372036854775808 too.
  std::shared_ptr<const Expr> literal(bool negative, std::string& error) {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_ascii_digit(text_[pos_])) ++pos_;
    const std::string digits = (negative ? "-" : "") + std::string(text_.substr(start, pos_ - start));
    auto e = std::make_shared<Expr>();
    e->kind = Expr::Kind::kInt;
    if (std::from_chars(digits.data(), digits.data() + digits.size(), e->value).ec != std::errc()) {
      error = "the number " + digits + " in the expression is too " +
              (negative ? "small (at least -9223372036854775808)" : "large (at most 9223372036854775807)");
      return nullptr;
    }
    return e;
  }
  // Whether -`value` fits int64 (-(-2^63) does not).
  static bool negatable(int64_t value, std::string& error) {
    if (value != std::numeric_limits<int64_t>::min()) return true;
    error = "-(-9223372036854775808) in the expression is too large (at most 9223372036854775807)";
    return false;
  }
  bool accept_two(char first, char second) {
    skip_space();
    if (pos_ + 1 < text_.size() && text_[pos_] == first && text_[pos_ + 1] == second) {
      pos_ += 2;
      return true;
    }
    return false;
  }
  static std::shared_ptr<const Expr> node(Expr::Kind kind, std::shared_ptr<const Expr> lhs,
                                          std::shared_ptr<const Expr> rhs) {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->lhs = std::move(lhs);
    e->rhs = std::move(rhs);
    return e;
  }
  std::shared_ptr<const Expr> sum(std::string& error) {
    std::shared_ptr<const Expr> e = product(error);
    while (e) {
      if (accept('+')) e = node(Expr::Kind::kAdd, e, product(error));
      else if (accept('-')) e = node(Expr::Kind::kSub, e, product(error));
      else break;
      if (!e->rhs) return nullptr;
    }
    return e;
  }
  std::shared_ptr<const Expr> product(std::string& error) {
    std::shared_ptr<const Expr> e = atom(error);
    while (e) {
      if (accept('*')) e = node(Expr::Kind::kMul, e, atom(error));
      else if (accept_two('/', '/')) e = node(Expr::Kind::kFloorDiv, e, atom(error));
      else if (accept('/')) e = node(Expr::Kind::kDiv, e, atom(error));
      else if (mod_ && accept('%')) e = node(Expr::Kind::kMod, e, atom(error));
      else break;
      if (!e->rhs) return nullptr;
      if (e->kind != Expr::Kind::kMul && e->rhs->kind == Expr::Kind::kInt &&
          e->rhs->value == 0) {
        error = "it divides by zero";
        return nullptr;
      }
    }
    return e;
  }
  std::shared_ptr<const Expr> atom(std::string& error) {
    skip_space();
    if (accept('-')) {
      // A negative literal (a value range's `min: -1`; -2^63 too, whose
      // digits alone do not fit int64), else unary minus, as 0 - atom.
      if (digit_next()) return literal(true, error);
      if (++depth_ > 32) {
        error = "the expression nests more than 32 levels deep";
        return nullptr;
      }
      auto zero = std::make_shared<Expr>();
      zero->kind = Expr::Kind::kInt;
      std::shared_ptr<const Expr> operand = atom(error);
      --depth_;
      if (operand && operand->kind == Expr::Kind::kInt && !negatable(operand->value, error)) return nullptr;
      return operand ? node(Expr::Kind::kSub, zero, operand) : nullptr;
    }
    if (accept('(')) {
      if (++depth_ > 32) {
        error = "the expression nests more than 32 parentheses deep";
        return nullptr;
      }
      std::shared_ptr<const Expr> e = sum(error);
      --depth_;
      if (e && !accept(')')) {
        error = "missing ')' in the expression";
        return nullptr;
      }
      return e;
    }
    // Every literal that fits int64 (a count of elements may reach 2^63 - 1).
    if (digit_next()) return literal(false, error);
    const size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    const std::string name(text_.substr(start, pos_ - start));
    if (name.empty()) {
      error = pos_ < text_.size() ? "unexpected '" + std::string(text_.substr(pos_, 1)) + "' in the expression"
                                  : "the expression ends too early";
      return nullptr;
    }
    if (!is_symbol_identifier(name) || is_reserved_name(name)) {
      error = "'" + name + "' in the expression is not a valid " + (mod_ ? "name" : "shape symbol");
      return nullptr;
    }
    auto e = std::make_shared<Expr>();
    e->kind = Expr::Kind::kSymbol;
    e->symbol = name;
    return e;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool mod_;
};

}  // namespace

void expr_symbols(const Expr& e, std::vector<std::string>& out) {
  if (e.kind == Expr::Kind::kSymbol) out.push_back(e.symbol);
  if (e.lhs) expr_symbols(*e.lhs, out);
  if (e.rhs) expr_symbols(*e.rhs, out);
}

std::shared_ptr<const Expr> parse_shape_expr(std::string_view text, std::string& error) {
  return ExprParser(text).parse(error);
}

std::optional<Constraint> parse_constraint(std::string_view text, std::string& error) {
  std::optional<Constraint> c = ExprParser(text, true).constraint(error);
  if (c) c->text = std::string(text);
  return c;
}

}  // namespace opgen::gen
