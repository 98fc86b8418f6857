// Renders a parsed template: statements write to an output string, expressions evaluate to
// Values, with jinja2's scoping (a for loop, macro, block set or filter block is a scope of its
// own; if is not).
#include <fmt/format.h>

#include <deque>
#include <unordered_map>

#include "template/ast.h"
#include "template/builtins.h"
#include "template/lexer.h"
#include "template/parser.h"
#include "template/template.h"

namespace ps::jinja {

struct Template::Impl {
  Body body;
};

namespace {

constexpr int64_t kMaxRange = 100000;  // as jinja2's sandbox

struct Frame {
  std::unordered_map<std::string, Value> vars;
  Frame* parent = nullptr;
};

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  explicit Renderer(const RenderOptions& o) : opt_(o) {}
  ~Renderer() {
    // Namespaces may hold themselves (`set ns.me = ns`): break such cycles.
    for (auto& d : namespaces_) d->items.clear();
  }

  std::string render(const Body& body, const nlohmann::ordered_json& vars) {
    Frame* globals = new_frame(nullptr);
    add_globals(*globals);
    Frame* root = new_frame(globals);
    if (!vars.is_object()) throw TemplateError("template variables must be a JSON object");
    for (auto it = vars.begin(); it != vars.end(); ++it)
      root->vars[it.key()] = from_json(it.value());
    std::string out;
    exec(body, root, out);
    return out;
  }

 private:
  const RenderOptions& opt_;
  std::deque<Frame> frames_;
  std::vector<std::shared_ptr<Dict>> namespaces_;
  uint64_t steps_ = 0;
  int depth_ = 0;

  struct Depth {
    Renderer& r;
    explicit Depth(Renderer& renderer) : r(renderer) {
      if (++r.depth_ > r.opt_.max_depth)
        throw TemplateError(fmt::format("template nests deeper than {} levels (runaway recursion?)",
                                        r.opt_.max_depth));
    }
    ~Depth() { --r.depth_; }
  };

  void step() {
    if (++steps_ > opt_.max_steps)
      throw TemplateError(fmt::format("template ran more than {} steps", opt_.max_steps));
  }

  Frame* new_frame(Frame* parent) {
    frames_.emplace_back();
    frames_.back().parent = parent;
    return &frames_.back();
  }

  void append(std::string& out, const std::string& s) {
    out += s;
    if (out.size() > opt_.max_output)
      throw TemplateError(fmt::format("template output exceeds {} bytes", opt_.max_output));
  }

  static Value lookup(Frame* f, const std::string& name) {
    for (; f; f = f->parent) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return it->second;
    }
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  void add_globals(Frame& g) {
    g.vars["range"] = Value::function("range", [](CallArgs& a) {
      if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3)
        throw TemplateError("range expects 1 to 3 integer arguments");
      std::vector<int64_t> n;
      for (const Value& v : a.pos) {
        if (v.kind != Value::Kind::Int && v.kind != Value::Kind::Bool)
          throw TemplateError(
              fmt::format("'{}' object cannot be interpreted as an integer", type_name(v)));
        n.push_back(v.kind == Value::Kind::Bool ? v.b : v.i);
      }
      const int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0];
      const int64_t stride = n.size() > 2 ? n[2] : 1;
      if (stride == 0) throw TemplateError("range() arg 3 must not be zero");
      const long double count =
          stride > 0 ? (static_cast<long double>(stop) - start + stride - 1) / stride
                     : (static_cast<long double>(start) - stop - stride - 1) / -stride;
      if (count > kMaxRange)
        throw TemplateError(fmt::format(
            "Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange));
      List items;
      for (int64_t k = start; stride > 0 ? k < stop : k > stop; k += stride)
        items.push_back(Value::integer(k));
      return Value::make_list(std::move(items));
    });
    g.vars["namespace"] = Value::function("namespace", [this](CallArgs& a) {
      Value ns = Value::make_dict();
      ns.namespace_ = true;
      for (const Value& p : a.pos) {
        if (!p.is_dict())
          throw TemplateError("namespace() takes a mapping as its positional argument");
        for (const auto& [k, v] : p.dict->items) ns.dict->set(k, v);
      }
      for (const auto& [k, v] : a.kw) ns.dict->set(Value::string(k), v);
      namespaces_.push_back(ns.dict);
      return ns;
    });
    g.vars["dict"] = Value::function("dict", [](CallArgs& a) {
      Value d = Value::make_dict();
      if (a.pos.size() > 1) throw TemplateError("dict expected at most 1 argument");
      if (!a.pos.empty()) {
        const Value& p = a.pos[0];
        if (p.is_dict() && !p.namespace_) {
          d.dict->items = p.dict->items;
        } else {
          for (const Value& item : iterate(p)) {
            List kv = iterate(item);
            if (kv.size() != 2)
              throw TemplateError("dictionary update sequence element has the wrong length");
            d.dict->set(kv[0], kv[1]);
          }
        }
      }
      for (const auto& [k, v] : a.kw) d.dict->set(Value::string(k), v);
      return d;
    });
    g.vars["raise_exception"] = Value::function("raise_exception", [](CallArgs& a) -> Value {
      throw TemplateError(to_str(a.get(0, "message")), 0, true);
    });
    g.vars["strftime_now"] = Value::function("strftime_now", [this](CallArgs& a) {
      const Value f = a.get(0, "format");
      if (!f.is_string()) throw TemplateError("strftime_now expects a format string");
      const std::time_t t = opt_.now ? *opt_.now : std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      if (f.s.empty()) return Value::string("");
      std::string buf(256 + f.s.size() * 16, '\0');
      const size_t n = std::strftime(buf.data(), buf.size(), f.s.c_str(), &tm);
      buf.resize(n);
      return Value::string(buf);
    });
    g.vars["joiner"] = Value::function("joiner", [](CallArgs& a) {
      auto used = std::make_shared<bool>(false);
      const std::string sep = to_str(a.get(0, "sep", Value::string(", ")));
      return Value::function("joiner", [used, sep](CallArgs&) {
        if (!*used) {
          *used = true;
          return Value::string("");
        }
        return Value::string(sep);
      });
    });
    // cycler(a, b, ...): next() gives the current item and moves on, reset() goes back to the
    // first; `current` is the item next() gives. State lives in the shared dict.
    g.vars["cycler"] = Value::function("cycler", [](CallArgs& a) {
      if (a.pos.empty()) throw TemplateError("at least one item has to be provided");
      Value c = Value::make_dict();
      auto items = std::make_shared<List>(a.pos);
      auto pos = std::make_shared<size_t>(0);
      std::weak_ptr<Dict> self = c.dict;
      c.dict->set(Value::string("current"), (*items)[0]);
      c.dict->set(Value::string("items"), Value::make_list(*items));
      c.dict->set(Value::string("next"), Value::function("next", [items, pos, self](CallArgs&) {
                    const Value out = (*items)[*pos];
                    *pos = (*pos + 1) % items->size();
                    if (auto d = self.lock()) d->set(Value::string("current"), (*items)[*pos]);
                    return out;
                  }));
      c.dict->set(Value::string("reset"), Value::function("reset", [items, pos, self](CallArgs&) {
                    *pos = 0;
                    if (auto d = self.lock()) d->set(Value::string("current"), (*items)[0]);
                    return Value::none();
                  }));
      return c;
    });
    g.vars["lipsum"] = Value::undefined("lipsum() is not supported");
  }

  // ---- statements ----

  Flow exec(const Body& body, Frame* f, std::string& out) {
    for (const auto& s : body) {
      const Flow flow = exec(*s, f, out);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s, Frame* f, std::string& out) {
    Depth guard(*this);
    step();
    try {
      return exec_inner(s, f, out);
    } catch (const TemplateError& e) {
      if (e.line() == 0) throw TemplateError(e.message(), s.line, e.raised());
      throw;
    }
  }

  void assign(const Target& t, const Value& v, Frame* f) {
    switch (t.kind) {
      case Target::Kind::Name:
        f->vars[t.name] = v;
        return;
      case Target::Kind::Attribute: {
        const Value ns = lookup(f, t.name);
        if (!ns.is_dict() || !ns.namespace_)
          throw TemplateError("cannot assign attribute on non-namespace object");
        ns.dict->set(Value::string(t.attribute), v);
        return;
      }
      case Target::Kind::Names: {
        List items = iterate(v);
        if (items.size() != t.names.size())
          throw TemplateError(
              items.size() > t.names.size()
                  ? fmt::format("too many values to unpack (expected {})", t.names.size())
                  : fmt::format("not enough values to unpack (expected {}, got {})", t.names.size(),
                                items.size()));
        for (size_t k = 0; k < items.size(); ++k) f->vars[t.names[k]] = items[k];
        return;
      }
    }
  }

  Value apply_chain(const Expr* chain, Frame* f, const Value& input) {
    if (!chain) return input;
    const Value in = apply_chain(chain->args[0].get(), f, input);
    CallArgs a = arguments(*chain, f, 1);
    return apply_filter(chain->name, in, a);
  }

  Flow exec_inner(const Stmt& s, Frame* f, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::Text:
        append(out, s.text);
        return Flow::Normal;
      case Stmt::Kind::Output:
        append(out, to_str(eval(*s.expr, f)));
        return Flow::Normal;
      case Stmt::Kind::If:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond, f))) return exec(body, f, out);
        return exec(s.else_body, f, out);
      case Stmt::Kind::For:
        return exec_for(s, f, out);
      case Stmt::Kind::Set:
        assign(s.target, eval(*s.expr, f), f);
        return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        std::string text;
        exec(s.body, new_frame(f), text);
        assign(s.target, apply_chain(s.filter.get(), f, Value::string(std::move(text))), f);
        return Flow::Normal;
      }
      case Stmt::Kind::FilterBlock: {
        std::string text;
        exec(s.body, new_frame(f), text);
        append(out, to_str(apply_chain(s.filter.get(), f, Value::string(std::move(text)))));
        return Flow::Normal;
      }
      case Stmt::Kind::Macro:
        f->vars[s.macro->name] = make_macro(s.macro, f);
        return Flow::Normal;
      case Stmt::Kind::CallBlock: {
        const Expr& call_expr = *s.expr;
        Value callee = eval(*call_expr.args[0], f);
        CallArgs a = arguments(call_expr, f, 1);
        a.kw.emplace_back("caller", make_macro(s.macro, f));
        append(out, to_str(call(callee, a)));
        return Flow::Normal;
      }
      case Stmt::Kind::With: {
        std::vector<Value> values;
        for (const auto& as : s.assignments) values.push_back(eval(*as.second, f));
        Frame* inner = new_frame(f);
        for (size_t k = 0; k < values.size(); ++k) assign(s.assignments[k].first, values[k], inner);
        return exec(s.body, inner, out);
      }
      case Stmt::Kind::Break:
        return Flow::Break;
      case Stmt::Kind::Continue:
        return Flow::Continue;
      case Stmt::Kind::Block:
        return exec(s.body, f, out);
    }
    return Flow::Normal;
  }

  Flow exec_for(const Stmt& s, Frame* f, std::string& out) {
    List items = iterate(eval(*s.expr, f));
    Frame* loop_frame = new_frame(f);
    if (s.filter) {
      List kept;
      for (const Value& x : items) {
        step();
        assign(s.target, x, loop_frame);
        if (truthy(eval(*s.filter, loop_frame))) kept.push_back(x);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(s.else_body, new_frame(f), out);
    const int64_t n = int64_t(items.size());
    auto index = std::make_shared<int64_t>(0);
    const Value cycle = Value::function("cycle", [index](CallArgs& a) {
      if (a.pos.empty()) throw TemplateError("no items for cycling given");
      return a.pos[size_t(*index % int64_t(a.pos.size()))];
    });
    auto last_changed = std::make_shared<std::optional<List>>();
    const Value changed = Value::function("changed", [last_changed](CallArgs& a) {
      if (*last_changed && last_changed->value().size() == a.pos.size()) {
        bool same = true;
        for (size_t k = 0; k < a.pos.size(); ++k)
          same = same && equals((**last_changed)[k], a.pos[k]);
        if (same) return Value::boolean(false);
      }
      *last_changed = a.pos;
      return Value::boolean(true);
    });
    // As jinja2: each iteration starts from the scope outside the loop, and the else block
    // runs unless some iteration reached the end of its body.
    bool completed = false;
    for (int64_t k = 0; k < n; ++k) {
      step();
      *index = k;
      loop_frame = new_frame(f);
      Value loop = Value::make_dict();
      Dict& d = *loop.dict;
      d.items.reserve(14);
      d.items.emplace_back(Value::string("index"), Value::integer(k + 1));
      d.items.emplace_back(Value::string("index0"), Value::integer(k));
      d.items.emplace_back(Value::string("revindex"), Value::integer(n - k));
      d.items.emplace_back(Value::string("revindex0"), Value::integer(n - k - 1));
      d.items.emplace_back(Value::string("first"), Value::boolean(k == 0));
      d.items.emplace_back(Value::string("last"), Value::boolean(k == n - 1));
      d.items.emplace_back(Value::string("length"), Value::integer(n));
      d.items.emplace_back(Value::string("depth"), Value::integer(1));
      d.items.emplace_back(Value::string("depth0"), Value::integer(0));
      d.items.emplace_back(
          Value::string("previtem"),
          k > 0 ? items[size_t(k - 1)] : Value::undefined("there is no previous item"));
      d.items.emplace_back(
          Value::string("nextitem"),
          k + 1 < n ? items[size_t(k + 1)] : Value::undefined("there is no next item"));
      d.items.emplace_back(Value::string("cycle"), cycle);
      d.items.emplace_back(Value::string("changed"), changed);
      loop_frame->vars["loop"] = std::move(loop);
      assign(s.target, items[size_t(k)], loop_frame);
      const Flow flow = exec(s.body, loop_frame, out);
      if (flow == Flow::Normal) completed = true;
      if (flow == Flow::Break) break;
    }
    if (!completed) return exec(s.else_body, new_frame(f), out);
    return Flow::Normal;
  }

  Value make_macro(const std::shared_ptr<Macro>& m, Frame* defined_in) {
    return Value::function(m->name, [this, m, defined_in](CallArgs& a) {
      Depth guard(*this);
      step();
      Frame* f = new_frame(defined_in);
      const size_t np = m->params.size();
      std::vector<bool> bound(np, false);
      List extra;
      for (size_t k = 0; k < a.pos.size(); ++k) {
        if (k < np) {
          f->vars[m->params[k]] = a.pos[k], bound[k] = true;
        } else if (m->uses_varargs) {
          extra.push_back(a.pos[k]);
        } else {
          throw TemplateError(
              fmt::format("macro '{}' takes not more than {} argument(s)", m->name, np));
        }
      }
      Value kwargs = Value::make_dict();
      bool has_caller = false;
      for (const auto& [key, v] : a.kw) {
        const auto it = std::find(m->params.begin(), m->params.end(), key);
        if (it != m->params.end()) {
          const size_t k = size_t(it - m->params.begin());
          if (bound[k])
            throw TemplateError(
                fmt::format("macro '{}' got multiple values for argument '{}'", m->name, key));
          f->vars[key] = v, bound[k] = true;
        } else if (key == "caller" && m->uses_caller) {
          f->vars["caller"] = v, has_caller = true;
        } else if (m->uses_kwargs) {
          kwargs.dict->set(Value::string(key), v);
        } else {
          throw TemplateError(
              fmt::format("macro '{}' takes no keyword argument '{}'", m->name, key));
        }
      }
      const size_t first_default = np - m->defaults.size();
      for (size_t k = 0; k < np; ++k) {
        if (bound[k]) continue;
        f->vars[m->params[k]] =
            k >= first_default
                ? eval(*m->defaults[k - first_default], f)
                : Value::undefined(fmt::format("parameter '{}' was not provided", m->params[k]));
      }
      if (m->uses_varargs) f->vars["varargs"] = Value::make_list(std::move(extra), true);
      if (m->uses_kwargs) f->vars["kwargs"] = kwargs;
      if (m->uses_caller && !has_caller) f->vars["caller"] = Value::undefined("No caller defined");
      std::string text;
      exec(m->body, f, text);
      return Value::string(std::move(text));
    });
  }

  // ---- expressions ----

  CallArgs arguments(const Expr& e, Frame* f, size_t first) {
    CallArgs a;
    for (size_t k = first; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k], f));
    for (const auto& [key, x] : e.kwargs) a.kw.emplace_back(key, eval(*x, f));
    return a;
  }

  Value eval(const Expr& e, Frame* f) {
    Depth guard(*this);
    Value v = eval_inner(e, f);
    if (v.is_string() && v.s.size() > kMaxValueBytes)
      throw TemplateError(fmt::format("a value would exceed {} MiB", kMaxValueBytes >> 20));
    return v;
  }

  Value eval_inner(const Expr& e, Frame* f) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.value;
      case Expr::Kind::Name:
        return lookup(f, e.name);
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        List items;
        for (const auto& x : e.args) items.push_back(eval(*x, f));
        return Value::make_list(std::move(items), e.kind == Expr::Kind::Tuple);
      }
      case Expr::Kind::Dict: {
        Value d = Value::make_dict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k], f);
          if (key.is_list() && !key.tuple) throw TemplateError("unhashable type: 'list'");
          if (key.is_dict()) throw TemplateError("unhashable type: 'dict'");
          d.dict->set(key, eval(*e.args[k + 1], f));
        }
        return d;
      }
      case Expr::Kind::GetAttr:
        return get_attr(eval(*e.args[0], f), e.name);
      case Expr::Kind::GetItem:
        return get_item(eval(*e.args[0], f), eval(*e.args[1], f));
      case Expr::Kind::Slice: {
        const Value obj = eval(*e.args[0], f);
        Value parts[3];
        for (int k = 0; k < 3; ++k)
          if (e.args[size_t(k) + 1]) parts[k] = eval(*e.args[size_t(k) + 1], f);
        return get_slice(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::Call: {
        const Expr& callee = *e.args[0];
        if (callee.kind == Expr::Kind::GetAttr) {
          const Value obj = eval(*callee.args[0], f);
          CallArgs a = arguments(e, f, 1);
          return call_method(obj, callee.name, a);
        }
        const Value fn = eval(callee, f);
        CallArgs a = arguments(e, f, 1);
        return call(fn, a);
      }
      case Expr::Kind::Filter: {
        const Value in = e.args[0] ? eval(*e.args[0], f) : Value::undefined();
        CallArgs a = arguments(e, f, 1);
        return apply_filter(e.name, in, a);
      }
      case Expr::Kind::Test: {
        const Value in = eval(*e.args[0], f);
        CallArgs a = arguments(e, f, 1);
        return Value::boolean(apply_test(e.name, in, a) != e.negated);
      }
      case Expr::Kind::Unary: {
        const Value x = eval(*e.args[0], f);
        if (e.name == "not") return Value::boolean(!truthy(x));
        if (x.is_undefined()) fail_undefined(x);
        if (!x.is_number())
          throw TemplateError(
              fmt::format("bad operand type for unary {}: '{}'", e.name, type_name(x)));
        if (e.name == "+") return x.kind == Value::Kind::Bool ? Value::integer(x.b) : x;
        if (x.kind == Value::Kind::Float) return Value::number(-x.f);
        const int64_t i = x.kind == Value::Kind::Bool ? x.b : x.i;
        if (i == INT64_MIN) throw TemplateError("integer overflow");
        return Value::integer(-i);
      }
      case Expr::Kind::Binary:
        return binary_op(e.name, eval(*e.args[0], f), eval(*e.args[1], f));
      case Expr::Kind::And: {
        Value a = eval(*e.args[0], f);
        return truthy(a) ? eval(*e.args[1], f) : a;
      }
      case Expr::Kind::Or: {
        Value a = eval(*e.args[0], f);
        return truthy(a) ? a : eval(*e.args[1], f);
      }
      case Expr::Kind::Compare: {
        Value left = eval(*e.args[0], f);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.args[k + 1], f);
          if (!truthy(binary_op(e.ops[k], left, right))) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::Cond:
        if (truthy(eval(*e.args[0], f))) return eval(*e.args[1], f);
        return e.args[2] ? eval(*e.args[2], f)
                         : Value::undefined("the condition was false and there is no else");
    }
    return Value::undefined();
  }
};

}  // namespace

Template::Template(std::string_view source) : impl_(std::make_unique<Impl>()) {
  impl_->body = parse(tokenize(source));
}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& variables,
                             const RenderOptions& options) const {
  Renderer r(options);
  return r.render(impl_->body, variables);
}

std::string describe(const TemplateError& e) {
  return e.line() > 0 ? fmt::format("template line {}: {}", e.line(), e.message()) : e.message();
}

}  // namespace ps::jinja
