#include "shape_expr.h"

#include <charconv>
#include <system_error>

#include "names.h"

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
        skip_space();
        const bool negative = accept('-');
        std::shared_ptr<const Expr> v = atom(error);
        if (!v || v->kind != Expr::Kind::kInt) {
          if (error.empty()) error = "'in' takes a list of integers in brackets, such as [64, 128]";
          return std::nullopt;
        }
        c.set.push_back(negative ? -v->value : v->value);
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
    if (accept('-')) {  // unary minus, as 0 - atom (a value range's `min: -1`)
      if (++depth_ > 32) {
        error = "the expression nests more than 32 levels deep";
        return nullptr;
      }
      auto zero = std::make_shared<Expr>();
      zero->kind = Expr::Kind::kInt;
      std::shared_ptr<const Expr> operand = atom(error);
      --depth_;
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
    const size_t start = pos_;
    if (pos_ < text_.size() && is_ascii_digit(text_[pos_])) {
      while (pos_ < text_.size() && is_ascii_digit(text_[pos_])) ++pos_;
      auto e = std::make_shared<Expr>();
      e->kind = Expr::Kind::kInt;
      const std::string_view digits = text_.substr(start, pos_ - start);
      // Every literal that fits int64 (a count of elements may reach 2^63 - 1).
      if (std::from_chars(digits.data(), digits.data() + digits.size(), e->value).ec != std::errc()) {
        error = "the number " + std::string(digits) + " in the expression is too large (at most 9223372036854775807)";
        return nullptr;
      }
      return e;
    }
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
