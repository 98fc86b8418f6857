#include "grammar/grammar.h"

#include <fmt/format.h>

#include <functional>
#include <map>

#include "tokenizer/unicode_text.h"

namespace ps::grammar {

bool CharSet::intersects(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& [a, b] : ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  // Some code point of [lo, hi] outside every range: walk up from lo past the ranges.
  uint32_t c = lo;
  bool moved = true;
  while (moved) {
    moved = false;
    for (const auto& [a, b] : ranges)
      if (c >= a && c <= b) {
        if (b >= hi) return false;
        c = b + 1;
        moved = true;
      }
  }
  return c <= hi;
}

namespace {

constexpr uint32_t kMaxRepeat = 10000;
// Symbols in all: repetitions of repetitions grow fast ("a"{9999}{9999}).
constexpr size_t kMaxSymbols = size_t(1) << 20;

using Seq = std::vector<Symbol>;

class Parser {
 public:
  explicit Parser(std::string_view src) : s_(src) {}

  Grammar run() {
    for (;;) {
      space(true);
      if (at_end()) break;
      const std::string name = parse_name();
      space(false);
      if (s_.substr(pos_, 3) != "::=") fail(fmt::format("expected '::=' after '{}'", name));
      pos_ += 3;
      space(true);
      const uint32_t id = rule_id(name);
      if (defined_[id]) fail(fmt::format("rule '{}' is defined twice", name));
      defined_[id] = true;
      alts_[id] = parse_alternatives(false);
      space(false);
      if (!at_end() && peek() != '\n' && peek() != '\r')
        fail(fmt::format("unexpected '{}' in rule '{}'", peek(), name));
    }
    for (size_t i = 0; i < names_.size(); ++i)
      if (!defined_[i])
        throw GrammarError(fmt::format("grammar: rule '{}' is used but not defined", names_[i]));
    const auto root = ids_.find("root");
    if (root == ids_.end()) throw GrammarError("grammar: no rule named 'root'");
    Grammar g;
    g.root = root->second;
    g.sets = std::move(sets_);
    for (size_t i = 0; i < names_.size(); ++i) {
      Rule r{names_[i], {}};
      for (const Seq& alt : alts_[i]) {
        r.alternatives.push_back(uint32_t(g.code.size()));
        g.code.insert(g.code.end(), alt.begin(), alt.end());
        g.code.push_back(Symbol{});
      }
      g.rules.push_back(std::move(r));
    }
    check_left_recursion(g);
    return g;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) line += s_[i] == '\n';
    throw GrammarError(fmt::format("grammar: line {}: {}", line, what));
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  void space(bool newlines) {
    while (!at_end()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }
  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && name_char(s_[pos_])) ++pos_;
    if (pos_ == start)
      fail(at_end() ? "expected a rule name" : fmt::format("expected a rule name at '{}'", peek()));
    return std::string(s_.substr(start, pos_ - start));
  }

  uint32_t rule_id(const std::string& name) {
    auto [it, fresh] = ids_.emplace(name, uint32_t(names_.size()));
    if (fresh) {
      names_.push_back(name);
      alts_.emplace_back();
      defined_.push_back(false);
    }
    return it->second;
  }
  uint32_t new_rule(const std::string& base, std::vector<Seq> alts) {
    std::string name;
    do name = fmt::format("{}-{}", base, ++generated_);
    while (ids_.count(name));
    const uint32_t id = rule_id(name);
    alts_[id] = std::move(alts);
    defined_[id] = true;
    return id;
  }

  // One code point of the grammar's text (UTF-8), or an escape.
  uint32_t parse_char() {
    if (at_end()) fail("unexpected end of the grammar");
    const auto b = uint8_t(s_[pos_]);
    if (b == '\\') {
      ++pos_;
      if (at_end()) fail("an escape at the end of the grammar");
      const char e = s_[pos_++];
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '\'':
          return uint32_t(e);
        case 'x':
          return hex(2);
        case 'u':
          return hex(4);
        case 'U':
          return hex(8);
        default:
          fail(fmt::format("unknown escape '\\{}'", e));
      }
    }
    uint32_t c = 0;
    const size_t len = unicode::utf8_lead(b, c);
    if (len == 0 || pos_ + len > s_.size()) fail("invalid UTF-8 in the grammar");
    for (size_t i = 1; i < len; ++i) {
      const auto cb = uint8_t(s_[pos_ + i]);
      if ((cb & 0xC0) != 0x80) fail("invalid UTF-8 in the grammar");
      c = (c << 6) | (cb & 0x3F);
    }
    // A four-byte lead of F4..F7 can spell values past Unicode's last code point, which no
    // escape can print back (to_gbnf).
    if (c > 0x10FFFF) fail("invalid UTF-8 in the grammar (a code point beyond U+10FFFF)");
    pos_ += len;
    return c;
  }
  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail(fmt::format("expected {} hex digits in an escape", digits));
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    if (v > 0x10FFFF) fail("an escape beyond U+10FFFF");
    return v;
  }

  Symbol set_symbol(CharSet set) {
    sets_.push_back(std::move(set));
    return Symbol{Symbol::Type::chars, uint32_t(sets_.size() - 1)};
  }

  std::vector<Seq> parse_alternatives(bool nested) {
    std::vector<Seq> alts;
    alts.push_back(parse_sequence(nested));
    while (peek() == '|') {
      ++pos_;
      space(true);
      alts.push_back(parse_sequence(nested));
    }
    return alts;
  }

  Seq parse_sequence(bool nested) {
    Seq seq;
    size_t last = 0;  // where the last item's symbols start
    for (;;) {
      space(nested);
      const char c = peek();
      if (at_end() || c == '|' || c == ')' || c == '\n' || c == '\r') break;
      if (c == '"') {
        ++pos_;
        last = seq.size();
        while (peek() != '"') {
          if (at_end() || peek() == '\n') fail("a literal without its closing '\"'");
          const uint32_t ch = parse_char();
          seq.push_back(set_symbol(CharSet{{{ch, ch}}, false}));
        }
        ++pos_;
      } else if (c == '[') {
        ++pos_;
        CharSet set;
        if (peek() == '^') {
          set.negated = true;
          ++pos_;
        }
        while (peek() != ']') {
          if (at_end()) fail("a character set without its closing ']'");
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (peek() == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
            ++pos_;
            hi = parse_char();
            if (hi < lo) fail("a character range whose end is before its start");
          }
          set.ranges.emplace_back(lo, hi);
        }
        ++pos_;
        last = seq.size();
        seq.push_back(set_symbol(std::move(set)));
      } else if (c == '.') {
        ++pos_;
        last = seq.size();
        seq.push_back(set_symbol(CharSet{{}, true}));
      } else if (c == '(') {
        ++pos_;
        space(true);
        std::vector<Seq> alts = parse_alternatives(true);
        space(true);
        if (peek() != ')') fail("a '(' without its ')'");
        ++pos_;
        last = seq.size();
        seq.push_back(Symbol{Symbol::Type::rule, new_rule("group", std::move(alts))});
      } else if (name_char(c)) {
        last = seq.size();
        seq.push_back(Symbol{Symbol::Type::rule, rule_id(parse_name())});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (seq.size() == last) fail(fmt::format("'{}' follows nothing", c));
        ++pos_;
        uint32_t min = 0, max = 0;
        bool unbounded = false;
        if (c == '*') {
          unbounded = true;
        } else if (c == '+') {
          min = 1, unbounded = true;
        } else if (c == '?') {
          max = 1;
        } else {
          space(false);
          min = parse_count();
          space(false);
          if (peek() == ',') {
            ++pos_;
            space(false);
            if (peek() == '}')
              unbounded = true;
            else
              max = parse_count();
          } else {
            max = min;
          }
          space(false);
          if (peek() != '}') fail("a repetition without its '}'");
          ++pos_;
          if (!unbounded && max < min) fail("a repetition {m,n} with n below m");
        }
        const Seq item(seq.begin() + std::ptrdiff_t(last), seq.end());
        symbols_ += item.size() * (size_t(unbounded ? min + 1 : std::max(min, max)) + 1);
        if (symbols_ > kMaxSymbols)
          fail(fmt::format("the grammar grows past {} symbols with its repetitions", kMaxSymbols));
        seq.resize(last);
        for (uint32_t i = 0; i < min; ++i) seq.insert(seq.end(), item.begin(), item.end());
        if (unbounded) {
          // star ::= item star | ()
          const uint32_t star = new_rule("star", {});
          Seq again = item;
          again.push_back(Symbol{Symbol::Type::rule, star});
          alts_[star] = {again, {}};
          seq.push_back(Symbol{Symbol::Type::rule, star});
        } else if (max > min) {
          // opt_1 ::= item | (); opt_k ::= item opt_(k-1) | ()
          uint32_t opt = new_rule("opt", {item, {}});
          for (uint32_t k = 1; k < max - min; ++k) {
            Seq more = item;
            more.push_back(Symbol{Symbol::Type::rule, opt});
            opt = new_rule("opt", {more, {}});
          }
          seq.push_back(Symbol{Symbol::Type::rule, opt});
        }
        // `last` stays: another operator takes all of this again (x?? is (x?)?, as llama.cpp
        // reads it).
      } else {
        fail(fmt::format("unexpected '{}'", c));
      }
    }
    return seq;
  }

  uint32_t parse_count() {
    const size_t start = pos_;
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + uint64_t(peek() - '0');
      if (v > kMaxRepeat) fail(fmt::format("a repetition count over {}", kMaxRepeat));
      ++pos_;
    }
    if (pos_ == start) fail("expected a number in a repetition");
    return uint32_t(v);
  }

  // A rule that can reach itself before consuming a character would send the matcher round
  // forever: refused here.
  static void check_left_recursion(const Grammar& g) {
    std::vector<bool> nullable(g.rules.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < g.rules.size(); ++r) {
        if (nullable[r]) continue;
        for (uint32_t at : g.rules[r].alternatives) {
          bool all = true;
          for (uint32_t i = at; g.code[i].type != Symbol::Type::end; ++i)
            if (g.code[i].type == Symbol::Type::chars || !nullable[g.code[i].index]) {
              all = false;
              break;
            }
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    // The rules each rule can start with (through nullable prefixes).
    std::vector<std::vector<uint32_t>> first(g.rules.size());
    for (size_t r = 0; r < g.rules.size(); ++r)
      for (uint32_t at : g.rules[r].alternatives)
        for (uint32_t i = at; g.code[i].type == Symbol::Type::rule; ++i) {
          first[r].push_back(g.code[i].index);
          if (!nullable[g.code[i].index]) break;
        }
    std::vector<int> state(g.rules.size(), 0);  // 0 new, 1 on the path, 2 done
    std::function<void(uint32_t)> visit = [&](uint32_t r) {
      state[r] = 1;
      for (uint32_t n : first[r]) {
        if (state[n] == 1)
          throw GrammarError(
              fmt::format("grammar: rule '{}' can reach itself without reading a character (left "
                          "recursion, or a repetition of something that can be empty)",
                          g.rules[n].name));
        if (state[n] == 0) visit(n);
      }
      state[r] = 2;
    };
    for (uint32_t r = 0; r < g.rules.size(); ++r)
      if (state[r] == 0) visit(r);
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> alts_;
  std::vector<bool> defined_;
  std::vector<CharSet> sets_;
  uint32_t generated_ = 0;
  size_t symbols_ = 0;  // symbols the repetitions made so far
};

std::string escape(uint32_t c) {
  if (c == '\\' || c == ']' || c == '[' || c == '-' || c == '^' || c == '"')
    return fmt::format("\\{}", char(c));
  if (c >= 0x20 && c < 0x7F) return std::string(1, char(c));
  if (c <= 0xFF) return fmt::format("\\x{:02X}", c);
  if (c <= 0xFFFF) return fmt::format("\\u{:04X}", c);
  return fmt::format("\\U{:08X}", c);
}

}  // namespace

Grammar Grammar::parse(std::string_view gbnf) { return Parser(gbnf).run(); }

std::string Grammar::to_gbnf() const {
  std::string out;
  for (const Rule& r : rules) {
    out += r.name + " ::=";
    for (size_t a = 0; a < r.alternatives.size(); ++a) {
      if (a) out += " |";
      if (code[r.alternatives[a]].type == Symbol::Type::end) out += " \"\"";
      for (uint32_t i = r.alternatives[a]; code[i].type != Symbol::Type::end; ++i) {
        out += ' ';
        if (code[i].type == Symbol::Type::rule) {
          out += rules[code[i].index].name;
          continue;
        }
        const CharSet& s = sets[code[i].index];
        if (s.negated && s.ranges.empty()) {
          out += '.';
          continue;
        }
        out += s.negated ? "[^" : "[";
        for (const auto& [lo, hi] : s.ranges)
          out += lo == hi ? escape(lo) : escape(lo) + "-" + escape(hi);
        out += ']';
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace ps::grammar
