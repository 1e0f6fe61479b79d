#include "shape_expr.h"

#include "names.h"

namespace opgen::gen {
namespace {

// Parses an output dimension expression: integers and shape symbols joined
// by + - * / and parentheses, e.g. `2*D`, `D/H`, `(N+1)*2`.
class ExprParser {
 public:
  explicit ExprParser(std::string_view text) : text_(text) {}

  std::shared_ptr<const Expr> parse(std::string& error) {
    std::shared_ptr<const Expr> e = sum(error);
    skip_space();
    if (e && pos_ != text_.size()) {
      error = "unexpected '" + std::string(text_.substr(pos_, 1)) + "' at column " + std::to_string(pos_ + 1) + " of the expression";
      return nullptr;
    }
    return error.empty() ? e : nullptr;
  }

 private:
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
      else if (accept('/')) e = node(Expr::Kind::kDiv, e, atom(error));
      else break;
      if (!e->rhs) return nullptr;
      if (e->kind == Expr::Kind::kDiv && e->rhs->kind == Expr::Kind::kInt && e->rhs->value == 0) {
        error = "it divides by zero";
        return nullptr;
      }
    }
    return e;
  }
  std::shared_ptr<const Expr> atom(std::string& error) {
    skip_space();
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
      const std::string digits(text_.substr(start, pos_ - start));
      if (digits.size() > 18) {
        error = "the number " + digits + " in the expression is too large";
        return nullptr;
      }
      e->value = std::stoll(digits);
      return e;
    }
    while (pos_ < text_.size() && (is_ascii_lower(text_[pos_]) || is_ascii_upper(text_[pos_]) ||
                                   is_ascii_digit(text_[pos_]) || text_[pos_] == '_')) {
      ++pos_;
    }
    const std::string name(text_.substr(start, pos_ - start));
    if (name.empty()) {
      error = pos_ < text_.size() ? "unexpected '" + std::string(text_.substr(pos_, 1)) + "' in the expression"
                                  : "the expression ends too early";
      return nullptr;
    }
    if (!is_symbol_identifier(name) || is_reserved_name(name)) {
      error = "'" + name + "' in the expression is not a valid shape symbol";
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

}  // namespace opgen::gen
