#include "template/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "template/builtins.h"

namespace ps::jinja {
namespace {

constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  Body run() {
    Body b = body({});
    return b;
  }

 private:
  const std::vector<Token>& t_;
  size_t p_ = 0;
  int depth_ = 0;
  int loops_ = 0;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) throw TemplateError("template nested too deeply", p.cur().line);
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  void next() {
    if (p_ + 1 < t_.size()) ++p_;
  }
  bool is_op(const char* op) const {
    return cur().kind == Token::Kind::Operator && cur().value == op;
  }
  bool is_name(const char* name) const {
    return cur().kind == Token::Kind::Name && cur().value == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const { throw TemplateError(what, cur().line); }
  std::string describe(const Token& k) const {
    switch (k.kind) {
      case Token::Kind::End:
        return "end of template";
      case Token::Kind::BlockEnd:
        return "end of statement block";
      case Token::Kind::VarEnd:
        return "end of print statement";
      case Token::Kind::Text:
        return "template data";
      case Token::Kind::String:
        return "string";
      default:
        return fmt::format("'{}'", k.value);
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().kind != Token::Kind::Name)
      fail(fmt::format("expected a name, got {}", describe(cur())));
    std::string n = cur().value;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().kind != Token::Kind::BlockEnd)
      fail(fmt::format("expected the end of the statement, got {}", describe(cur())));
    next();
  }

  ExprPtr node(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // Statements up to a `{% name %}` whose name is in `ends` (left unread) or the end.
  Body body(std::initializer_list<const char*> ends) {
    DepthGuard guard(*this);
    Body out;
    for (;;) {
      const Token& k = cur();
      switch (k.kind) {
        case Token::Kind::Text: {
          auto s = std::make_unique<Stmt>();
          s->kind = Stmt::Kind::Text, s->line = k.line, s->text = k.value;
          out.push_back(std::move(s));
          next();
          break;
        }
        case Token::Kind::VarBegin: {
          next();
          auto s = std::make_unique<Stmt>();
          s->kind = Stmt::Kind::Output, s->line = k.line;
          s->expr = tuple(true);
          if (cur().kind != Token::Kind::VarEnd)
            fail(fmt::format("expected the end of the print statement, got {}", describe(cur())));
          next();
          out.push_back(std::move(s));
          break;
        }
        case Token::Kind::BlockBegin: {
          const Token& name = peek();
          if (name.kind == Token::Kind::Name)
            for (const char* e : ends)
              if (name.value == e) return out;
          next();
          out.push_back(statement(ends));
          break;
        }
        case Token::Kind::End:
          if (ends.size() != 0)
            fail(fmt::format("unexpected end of template: a block is still open (looking for '{}')",
                             *ends.begin()));
          return out;
        default:
          fail(fmt::format("unexpected {}", describe(k)));
      }
    }
  }

  // At `{% name`: reads `name %}`.
  void end_tag(const char* name) {
    next();  // BlockBegin
    if (!skip_name(name)) fail(fmt::format("expected '{}'", name));
    expect_block_end();
  }

  std::unique_ptr<Stmt> statement(std::initializer_list<const char*> open_ends) {
    if (cur().kind != Token::Kind::Name) fail("expected a tag name after '{%'");
    auto s = std::make_unique<Stmt>();
    s->line = cur().line;
    const std::string tag = cur().value;
    next();
    if (tag == "if") {
      s->kind = Stmt::Kind::If;
      ExprPtr cond = expression(true);
      expect_block_end();
      for (;;) {
        Body b = body({"elif", "else", "endif"});
        s->branches.emplace_back(std::move(cond), std::move(b));
        next();  // BlockBegin
        const std::string which = expect_name();
        if (which == "elif") {
          cond = expression(true);
          expect_block_end();
          continue;
        }
        if (which == "else") {
          expect_block_end();
          s->else_body = body({"endif"});
          end_tag("endif");
        } else {
          expect_block_end();
        }
        break;
      }
    } else if (tag == "for") {
      s->kind = Stmt::Kind::For;
      s->target = target(false);
      if (!skip_name("in")) fail("expected 'in' in the for loop");
      s->expr = tuple(false, true);
      if (skip_name("if")) s->filter = expression(true);
      s->recursive = skip_name("recursive");
      if (s->recursive) fail("recursive loops are not supported");
      expect_block_end();
      ++loops_;
      s->body = body({"endfor", "else"});
      --loops_;
      next();
      if (expect_name() == "else") {
        expect_block_end();
        s->else_body = body({"endfor"});
        end_tag("endfor");
      } else {
        expect_block_end();
      }
    } else if (tag == "set") {
      s->target = target(true);
      if (skip_op("=")) {
        s->kind = Stmt::Kind::Set;
        s->expr = tuple(true);
        expect_block_end();
      } else {
        s->kind = Stmt::Kind::SetBlock;
        if (s->target.kind == Target::Kind::Names) fail("a block set takes one name");
        if (is_op("|")) s->filter = filter_chain(nullptr);
        expect_block_end();
        s->body = body({"endset"});
        end_tag("endset");
      }
    } else if (tag == "macro") {
      s->kind = Stmt::Kind::Macro;
      s->macro = std::make_shared<Macro>();
      s->macro->name = expect_name();
      signature(*s->macro);
      expect_block_end();
      const int saved = loops_;
      loops_ = 0;
      s->macro->body = body({"endmacro"});
      loops_ = saved;
      end_tag("endmacro");
      scan_macro_names(*s->macro);
    } else if (tag == "call") {
      s->kind = Stmt::Kind::CallBlock;
      s->macro = std::make_shared<Macro>();
      s->macro->name = "caller";
      if (is_op("(")) signature(*s->macro);
      s->expr = expression(true);
      if (s->expr->kind != Expr::Kind::Call) fail("expected a call after {% call %}");
      expect_block_end();
      s->macro->body = body({"endcall"});
      end_tag("endcall");
      scan_macro_names(*s->macro);
    } else if (tag == "filter") {
      s->kind = Stmt::Kind::FilterBlock;
      s->filter = filter_chain(nullptr, false);
      expect_block_end();
      s->body = body({"endfilter"});
      end_tag("endfilter");
    } else if (tag == "with") {
      s->kind = Stmt::Kind::With;
      while (cur().kind != Token::Kind::BlockEnd) {
        if (!s->assignments.empty()) expect_op(",");
        Target t = target(false);
        expect_op("=");
        s->assignments.emplace_back(std::move(t), expression(true));
      }
      expect_block_end();
      s->body = body({"endwith"});
      end_tag("endwith");
    } else if (tag == "break" || tag == "continue") {
      if (loops_ == 0) fail(fmt::format("'{}' outside of a loop", tag));
      s->kind = tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
      expect_block_end();
    } else if (tag == "block") {
      // Without template inheritance a block renders where it stands.
      s->kind = Stmt::Kind::Block;
      const std::string name = expect_name();
      skip_name("scoped");
      skip_name("required");
      expect_block_end();
      s->body = body({"endblock"});
      next();
      expect_name();
      if (cur().kind == Token::Kind::Name) {
        if (cur().value != name)
          fail(fmt::format("mismatched endblock ('{}' for '{}')", cur().value, name));
        next();
      }
      expect_block_end();
    } else if (tag == "generation") {
      s->kind = Stmt::Kind::Block;
      expect_block_end();
      s->body = body({"endgeneration"});
      end_tag("endgeneration");
    } else {
      std::string hint;
      for (const char* e : open_ends) hint += fmt::format("{}'{}'", hint.empty() ? "" : " or ", e);
      fail(hint.empty() ? fmt::format("unknown tag '{}'", tag)
                        : fmt::format("unexpected tag '{}' (looking for {})", tag, hint));
    }
    return s;
  }

  void signature(Macro& m) {
    expect_op("(");
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      if (is_op(")")) break;
      m.params.push_back(expect_name());
      if (skip_op("=")) {
        m.defaults.push_back(expression(true));
      } else if (!m.defaults.empty()) {
        fail("a parameter without a default follows one with a default");
      }
    }
    expect_op(")");
  }

  // Whether the body reads caller, varargs or kwargs (jinja2 decides what a macro accepts by
  // that).
  static void scan_names(const Expr* e, Macro& m) {
    if (!e) return;
    if (e->kind == Expr::Kind::Name) {
      m.uses_caller |= e->name == "caller";
      m.uses_varargs |= e->name == "varargs";
      m.uses_kwargs |= e->name == "kwargs";
    }
    for (const auto& a : e->args) scan_names(a.get(), m);
    for (const auto& kv : e->kwargs) scan_names(kv.second.get(), m);
  }
  static void scan_body(const Body& b, Macro& m) {
    for (const auto& s : b) {
      scan_names(s->expr.get(), m);
      scan_names(s->filter.get(), m);
      for (const auto& br : s->branches) scan_names(br.first.get(), m), scan_body(br.second, m);
      for (const auto& a : s->assignments) scan_names(a.second.get(), m);
      scan_body(s->body, m);
      scan_body(s->else_body, m);
      if (s->macro && s->kind == Stmt::Kind::CallBlock) scan_body(s->macro->body, m);
    }
  }
  static void scan_macro_names(Macro& m) { scan_body(m.body, m); }

  Target target(bool allow_attribute) {
    Target t;
    const std::string first = expect_name();
    if (allow_attribute && skip_op(".")) {
      t.kind = Target::Kind::Attribute;
      t.name = first;
      t.attribute = expect_name();
      return t;
    }
    if (!is_op(",")) {
      t.name = first;
      return t;
    }
    t.kind = Target::Kind::Names;
    t.names.push_back(first);
    while (skip_op(",")) {
      if (cur().kind != Token::Kind::Name || is_name("in")) break;
      t.names.push_back(expect_name());
    }
    return t;
  }

  bool tuple_ends() const {
    const Token& k = cur();
    return k.kind == Token::Kind::VarEnd || k.kind == Token::Kind::BlockEnd ||
           k.kind == Token::Kind::End || (k.kind == Token::Kind::Operator && k.value == ")") ||
           (k.kind == Token::Kind::Name && (k.value == "if" || k.value == "recursive"));
  }

  // expr, expr, ... (a tuple when there is a comma).
  ExprPtr tuple(bool with_condexpr, bool for_loop = false, bool parenthesized = false) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool comma = false;
    for (;;) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        comma = true;
      }
      if (parenthesized ? is_op(")") : (tuple_ends() && (for_loop || !items.empty()))) break;
      items.push_back(with_condexpr ? expression(true) : or_expr());
    }
    if (items.empty() && !parenthesized)
      fail(fmt::format("expected an expression, got {}", describe(cur())));
    if (items.size() == 1 && !comma) return std::move(items[0]);
    auto e = node(Expr::Kind::Tuple, line);
    e->args = std::move(items);
    return e;
  }

  ExprPtr expression(bool with_condexpr) {
    DepthGuard guard(*this);
    ExprPtr e = or_expr();
    if (!with_condexpr) return e;
    while (is_name("if")) {
      const int line = cur().line;
      next();
      auto c = node(Expr::Kind::Cond, line);
      ExprPtr cond = or_expr();
      ExprPtr otherwise = skip_name("else") ? expression(true) : nullptr;
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(Expr::Kind k, const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = node(k, line);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      const int line = cur().line;
      next();
      e = binary(Expr::Kind::Or, "or", std::move(e), and_expr(), line);
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      const int line = cur().line;
      next();
      e = binary(Expr::Kind::And, "and", std::move(e), not_expr(), line);
    }
    return e;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = node(Expr::Kind::Unary, cur().line);
      next();
      e->name = "not";
      e->args.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    const int line = cur().line;
    ExprPtr first = math1();
    std::vector<ExprPtr> operands;
    std::vector<std::string> ops;
    for (;;) {
      std::string op;
      if (cur().kind == Token::Kind::Operator &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == ">" ||
           cur().value == "<=" || cur().value == ">=")) {
        op = cur().value;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().kind == Token::Kind::Name && peek().value == "in") {
        op = "not in";
        next(), next();
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(math1());
    }
    if (ops.empty()) return first;
    auto e = node(Expr::Kind::Compare, line);
    e->args.push_back(std::move(first));
    for (auto& o : operands) e->args.push_back(std::move(o));
    e->ops = std::move(ops);
    return e;
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().value;
      const int line = cur().line;
      next();
      e = binary(Expr::Kind::Binary, op, std::move(e), concat(), line);
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      const int line = cur().line;
      next();
      e = binary(Expr::Kind::Binary, "~", std::move(e), math2(), line);
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().value;
      const int line = cur().line;
      next();
      e = binary(Expr::Kind::Binary, op, std::move(e), pow(), line);
    }
    return e;
  }
  ExprPtr pow() {
    ExprPtr e = unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      next();
      e = binary(Expr::Kind::Binary, "**", std::move(e), unary(true), line);
    }
    return e;
  }
  ExprPtr unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(Expr::Kind::Unary, cur().line);
      e->name = cur().value;
      next();
      e->args.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filter_expr(std::move(e));
    return e;
  }

  ExprPtr primary() {
    const Token& k = cur();
    const int line = k.line;
    switch (k.kind) {
      case Token::Kind::Name: {
        auto e = node(Expr::Kind::Literal, line);
        if (k.value == "true" || k.value == "True") {
          e->value = Value::boolean(true);
        } else if (k.value == "false" || k.value == "False") {
          e->value = Value::boolean(false);
        } else if (k.value == "none" || k.value == "None") {
          e->value = Value::none();
        } else {
          e->kind = Expr::Kind::Name;
          e->name = k.value;
        }
        next();
        return e;
      }
      case Token::Kind::String: {
        std::string s;
        while (cur().kind == Token::Kind::String) {
          s += cur().value;
          next();
        }
        auto e = node(Expr::Kind::Literal, line);
        e->value = Value::string(std::move(s));
        return e;
      }
      case Token::Kind::Integer: {
        auto e = node(Expr::Kind::Literal, line);
        int64_t v = 0;
        const auto r = std::from_chars(k.value.data(), k.value.data() + k.value.size(), v);
        e->value = r.ec == std::errc() ? Value::integer(v)
                                       : Value::number(std::strtod(k.value.c_str(), nullptr));
        next();
        return e;
      }
      case Token::Kind::Float: {
        auto e = node(Expr::Kind::Literal, line);
        e->value = Value::number(std::strtod(k.value.c_str(), nullptr));
        next();
        return e;
      }
      case Token::Kind::Operator:
        if (k.value == "(") {
          next();
          ExprPtr e = tuple(true, false, true);
          expect_op(")");
          return e;
        }
        if (k.value == "[") {
          next();
          auto e = node(Expr::Kind::List, line);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(expression(true));
          }
          expect_op("]");
          return e;
        }
        if (k.value == "{") {
          next();
          auto e = node(Expr::Kind::Dict, line);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            e->args.push_back(expression(true));
            expect_op(":");
            e->args.push_back(expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      default:
        break;
    }
    fail(fmt::format("unexpected {}", describe(k)));
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      const int line = cur().line;
      if (is_op(".")) {
        next();
        if (cur().kind == Token::Kind::Name) {
          auto a = node(Expr::Kind::GetAttr, line);
          a->name = cur().value;
          a->args.push_back(std::move(e));
          next();
          e = std::move(a);
        } else if (cur().kind == Token::Kind::Integer) {
          auto a = node(Expr::Kind::GetItem, line);
          a->args.push_back(std::move(e));
          a->args.push_back(primary());
          e = std::move(a);
        } else {
          fail("expected a name or a number after '.'");
        }
      } else if (is_op("[")) {
        next();
        e = subscript(std::move(e), line);
        expect_op("]");
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr obj, int line) {
    ExprPtr parts[3];
    bool slice = false;
    int k = 0;
    if (!is_op(":")) parts[0] = expression(true);
    while (k < 2 && is_op(":")) {
      slice = true;
      next();
      ++k;
      if (!is_op(":") && !is_op("]")) parts[k] = expression(true);
    }
    if (!slice) {
      if (is_op(",")) {  // a[1, 2]: a tuple key
        auto t = node(Expr::Kind::Tuple, line);
        t->args.push_back(std::move(parts[0]));
        while (skip_op(",") && !is_op("]")) t->args.push_back(expression(true));
        parts[0] = std::move(t);
      }
      auto e = node(Expr::Kind::GetItem, line);
      e->args.push_back(std::move(obj));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    auto e = node(Expr::Kind::Slice, line);
    e->args.push_back(std::move(obj));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // `(args)` after a callee, filter or test: positional then keyword arguments.
  void arguments(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().kind == Token::Kind::Name && peek().kind == Token::Kind::Operator &&
          peek().value == "=") {
        std::string key = cur().value;
        next(), next();
        e.kwargs.emplace_back(std::move(key), expression(true));
      } else {
        if (!e.kwargs.empty()) fail("a positional argument follows a keyword argument");
        e.args.push_back(expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr call(ExprPtr callee) {
    auto e = node(Expr::Kind::Call, cur().line);
    e->args.push_back(std::move(callee));
    arguments(*e);
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".")) {
      next();
      n += "." + expect_name();
    }
    return n;
  }

  ExprPtr filter_chain(ExprPtr input, bool leading_pipe = true) {
    bool first = true;
    while (first ? (!leading_pipe || is_op("|")) : is_op("|")) {
      if (leading_pipe || !first) expect_op("|");
      first = false;
      auto f = node(Expr::Kind::Filter, cur().line);
      f->name = dotted_name();
      f->args.push_back(std::move(input));
      if (is_op("(")) arguments(*f);
      input = std::move(f);
    }
    return input;
  }

  ExprPtr filter_expr(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        e = filter_chain(std::move(e));
      } else if (is_name("is")) {
        next();
        auto t = node(Expr::Kind::Test, cur().line);
        t->negated = skip_name("not");
        t->name = dotted_name();
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          arguments(*t);
        } else if ((cur().kind == Token::Kind::Name || cur().kind == Token::Kind::String ||
                    cur().kind == Token::Kind::Integer || cur().kind == Token::Kind::Float ||
                    is_op("[") || is_op("{") || is_op("(")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail("tests cannot be chained with 'is'");
          t->args.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }
};

// jinja2 3 reports an unknown filter or test when it compiles the template, except inside an
// `if` statement or a conditional expression (a "soft" frame, which a loop, macro or block
// body inside them ends): there only calling it fails.
void check_names(const Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == Expr::Kind::Cond) soft = true;
  if (!soft && e->kind == Expr::Kind::Filter && !has_filter(e->name))
    throw TemplateError(fmt::format("no filter named '{}'", e->name), e->line);
  if (!soft && e->kind == Expr::Kind::Test && !has_test(e->name))
    throw TemplateError(fmt::format("no test named '{}'", e->name), e->line);
  for (const auto& a : e->args) check_names(a.get(), soft);
  for (const auto& kv : e->kwargs) check_names(kv.second.get(), soft);
}

void check_names(const Body& body, bool soft) {
  for (const auto& s : body) {
    switch (s->kind) {
      case Stmt::Kind::If:
        for (const auto& [cond, b] : s->branches)
          check_names(cond.get(), true), check_names(b, true);
        check_names(s->else_body, true);
        break;
      case Stmt::Kind::For:
        check_names(s->expr.get(), soft);
        check_names(s->filter.get(), false);
        check_names(s->body, false);
        check_names(s->else_body, false);
        break;
      case Stmt::Kind::Macro:
        for (const auto& d : s->macro->defaults) check_names(d.get(), false);
        check_names(s->macro->body, false);
        break;
      case Stmt::Kind::CallBlock:
        check_names(s->expr.get(), soft);
        check_names(s->macro->body, false);
        break;
      case Stmt::Kind::SetBlock:
      case Stmt::Kind::FilterBlock:
        check_names(s->filter.get(), false);
        check_names(s->body, false);
        break;
      case Stmt::Kind::With:
        for (const auto& a : s->assignments) check_names(a.second.get(), soft);
        check_names(s->body, false);
        break;
      case Stmt::Kind::Block:
        check_names(s->body, soft);
        break;
      default:
        check_names(s->expr.get(), soft);
    }
  }
}

}  // namespace

Body parse(const std::vector<Token>& tokens) {
  Body body = Parser(tokens).run();
  check_names(body, false);
  return body;
}

}  // namespace ps::jinja
