#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/unicode_text.h"

namespace ps::grammar {
namespace {

using ojson = nlohmann::ordered_json;

// The GBNF parser's largest repetition count.
constexpr uint64_t kMaxCount = 10000;
// Integer bounds beyond this are refused (so that +1 and negation stay in int64_t).
constexpr int64_t kMaxBound = 9'000'000'000'000'000'000;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;
// The most digits of an integer without an upper bound (as the `integer` rule).
constexpr size_t kMaxDigits = 16;
// $ref and allOf expansions inside one merge (a guard against refs that only name each other).
constexpr int kMaxMergeDepth = 64;

[[noreturn]] void fail(const std::string& what) { throw GrammarError("json_schema: " + what); }

std::string where(const std::string& ptr) { return ptr.empty() ? "the root" : ptr; }

std::string pointer_token(const std::string& key) {
  std::string out;
  for (const char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string child(const std::string& ptr, const std::string& key) {
  return ptr + "/" + pointer_token(key);
}

std::string compact(const ojson& v) {
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

// A GBNF literal of UTF-8 text: the bytes as they are, but for quotes, backslashes and controls.
std::string lit(std::string_view utf8) {
  std::string out = "\"";
  for (const char ch : utf8) {
    const auto c = uint8_t(ch);
    if (c == '"')
      out += "\\\"";
    else if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7F)
      out += fmt::format("\\x{:02X}", c);
    else
      out += ch;
  }
  return out + "\"";
}

std::string utf8(uint32_t c) {
  std::string s;
  unicode::append_utf8(s, c);
  return s;
}

// One code point inside a GBNF [set].
std::string set_char(uint32_t c) {
  if (c == '\\' || c == ']' || c == '[' || c == '-' || c == '^' || c == '"')
    return std::string("\\") + char(c);
  if (c >= 0x20 && c < 0x7F) return std::string(1, char(c));
  if (c <= 0xFF) return fmt::format("\\x{:02X}", c);
  if (c <= 0xFFFF) return fmt::format("\\u{:04X}", c);
  return fmt::format("\\U{:08X}", c);
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

// Two pieces of a sequence, either of which may be empty.
std::string seq(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + " " + b;
}

std::string alternatives(const std::vector<std::string>& alts) {
  std::vector<std::string> parts;
  for (const std::string& a : alts) parts.push_back(a.empty() ? "\"\"" : a);
  return parts.size() == 1 ? parts[0] : "( " + join(parts, " | ") + " )";
}

// `item` repeated lo..hi times (hi empty: no bound); `item` is one GBNF item.
std::string repeat(const std::string& item, uint64_t lo, std::optional<uint64_t> hi) {
  if (hi && *hi == 0) return "";
  if (hi && lo == 1 && *hi == 1) return item;
  if (!hi) return lo == 0 ? item + "*" : lo == 1 ? item + "+" : fmt::format("{}{{{},}}", item, lo);
  if (lo == 0 && *hi == 1) return item + "?";
  if (lo == *hi) return fmt::format("{}{{{}}}", item, lo);
  return fmt::format("{}{{{},{}}}", item, lo, *hi);
}

// ---- code point sets -----------------------------------------------------------------------

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.emplace_back(lo, hi);
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : normalized(r)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

Ranges intersect(const Ranges& a, const Ranges& b) {
  Ranges out;
  for (const auto& [alo, ahi] : normalized(a))
    for (const auto& [blo, bhi] : normalized(b)) {
      const uint32_t lo = std::max(alo, blo), hi = std::min(ahi, bhi);
      if (lo <= hi) out.emplace_back(lo, hi);
    }
  return normalized(out);
}

Ranges subtract(const Ranges& a, const Ranges& b) { return intersect(a, complement(b)); }

bool has(const Ranges& r, uint32_t c) {
  for (const auto& [lo, hi] : r)
    if (c >= lo && c <= hi) return true;
  return false;
}

std::string set_text(const Ranges& r, bool negated) {
  std::string out = negated ? "[^" : "[";
  for (const auto& [lo, hi] : r) {
    out += set_char(lo);
    if (hi > lo + 1) out += '-';
    if (hi > lo) out += set_char(hi);
  }
  return out + "]";
}

// Code points a JSON string holds only escaped (and surrogates, which are never characters).
const Ranges kJsonSpecial = {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0xD800, 0xDFFF}};

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMA-262's \s: WhiteSpace and LineTerminator.
const Ranges kSpace = {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                       {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                       {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
// What `.` does not match.
const Ranges kLineTerminator = {{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}};

// ---- primitive rules -----------------------------------------------------------------------

struct Primitive {
  const char* name;
  const char* body;
  std::vector<const char*> deps;
};

const std::vector<Primitive>& primitives() {
  static const std::vector<Primitive> p = {
      {"space", R"(( " " | "\n" [ \t]{0,20} )?)", {}},
      {"value",
       "object | array | string | number | boolean | null",
       {"object", "array", "string", "number", "boolean", "null"}},
      {"object",
       R"("{" space ( string space ":" space value space )"
       R"(( "," space string space ":" space value space )* )? "}")",
       {"space", "string", "value"}},
      {"array", R"("[" space ( value space ( "," space value space )* )? "]")", {"space", "value"}},
      {"string", R"("\"" char* "\"")", {"char"}},
      // A character of a JSON string: anything but quotes, backslashes and controls, or an
      // escape; \u escapes of surrogates only in pairs (one character, as the schema counts).
      {"char",
       R"([^"\\\x00-\x1F\uD800-\uDFFF] | "\\" ( ["\\/bfnrt] | "u" ( )"
       R"([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | )"
       R"([dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2} ) ))",
       {}},
      // A key character of additional properties: unescaped only (see key_excluding).
      {"key-char", R"([^"\\\x00-\x1F\uD800-\uDFFF])", {}},
      // Digits bounded as llama.cpp bounds them, so that a model cannot run on in digits.
      {"number",
       R"("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?)",
       {}},
      {"integer", R"("0" | "-"? [1-9] [0-9]{0,15})", {}},
      {"boolean", R"("true" | "false")", {}},
      {"null", R"("null")", {}},
      {"date-year", R"([1-9] [0-9]{3} | "0" [1-9] [0-9]{2} | "00" [1-9] [0-9] | "000" [1-9])", {}},
      {"date-leap-year",
       R"([0-9]{2} ( "0" [48] | [2468] [048] | [13579] [26] ) | )"
       R"(( "0" [48] | [2468] [048] | [13579] [26] ) "00")",
       {}},
      {"date",
       R"(date-year "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | )"
       R"(( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | )"
       R"("02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) | date-leap-year "-02-29")",
       {"date-year", "date-leap-year"}},
      {"time",
       R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? )"
       R"(( "Z" | [+\-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
       {}},
      {"date-time", R"(date "T" time)", {"date", "time"}},
      {"uuid",
       R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" )"
       R"([0-9a-fA-F]{12})",
       {}},
  };
  return p;
}

bool is_primitive(const std::string& name) {
  for (const Primitive& p : primitives())
    if (name == p.name) return true;
  return false;
}

// ---- keywords ------------------------------------------------------------------------------

const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"title",    "description", "examples", "default",
                                          "$schema",  "$id",         "$comment", "deprecated",
                                          "readOnly", "writeOnly",   "$defs",    "definitions"};
  return k;
}

const std::set<std::string>& keywords() {
  static const std::set<std::string> k = {"type",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "minProperties",
                                          "maxProperties",
                                          "items",
                                          "prefixItems",
                                          "additionalItems",
                                          "minItems",
                                          "maxItems",
                                          "uniqueItems",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "multipleOf"};
  return k;
}

bool is_annotation(const std::string& key) {
  return annotations().count(key) || key.rfind("x-", 0) == 0;
}

const std::set<std::string> kObjectKeys = {"properties", "required", "additionalProperties",
                                           "minProperties", "maxProperties"};
const std::set<std::string> kArrayKeys = {"items",    "prefixItems", "additionalItems",
                                          "minItems", "maxItems",    "uniqueItems"};
const std::set<std::string> kStringKeys = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string> kNumberKeys = {"minimum", "maximum", "exclusiveMinimum",
                                           "exclusiveMaximum", "multipleOf"};
const std::vector<std::string> kTypes = {"object",  "array",   "string", "number",
                                         "integer", "boolean", "null"};

// The schema's keywords that constrain (annotations dropped).
ojson constraints(const ojson& s) {
  ojson out = ojson::object();
  for (auto it = s.begin(); it != s.end(); ++it)
    if (!is_annotation(it.key())) out[it.key()] = it.value();
  return out;
}

// ---- regular expressions (pattern) ---------------------------------------------------------

struct Re {
  enum class Kind { set, seq, alt, rep } kind = Kind::seq;
  Ranges set;
  std::vector<Re> kids;
  uint64_t min = 0;
  std::optional<uint64_t> max;  // empty: no bound
};

bool nullable(const Re& r) {
  switch (r.kind) {
    case Re::Kind::set:
      return false;
    case Re::Kind::seq:
      return std::all_of(r.kids.begin(), r.kids.end(), nullable);
    case Re::Kind::alt:
      return std::any_of(r.kids.begin(), r.kids.end(), nullable);
    case Re::Kind::rep:
      return r.min == 0 || nullable(r.kids[0]);
  }
  return false;
}

// The same language without the empty string (none: nothing is left), so that repetitions of
// it never repeat nothing (the GBNF parser refuses `( x? )*`, and it would be ambiguous).
std::optional<Re> non_empty(const Re& r) {
  if (!nullable(r)) return r;
  switch (r.kind) {
    case Re::Kind::set:
      return r;
    case Re::Kind::seq: {
      // Every piece can be empty: the first non-empty piece is one of them, the rest as they are.
      Re alt{Re::Kind::alt, {}, {}, 0, {}};
      for (size_t i = 0; i < r.kids.size(); ++i) {
        std::optional<Re> first = non_empty(r.kids[i]);
        if (!first) continue;
        Re s{Re::Kind::seq, {}, {*first}, 0, {}};
        s.kids.insert(s.kids.end(), r.kids.begin() + std::ptrdiff_t(i) + 1, r.kids.end());
        alt.kids.push_back(std::move(s));
      }
      if (alt.kids.empty()) return std::nullopt;
      if (alt.kids.size() == 1) return alt.kids[0];
      return alt;
    }
    case Re::Kind::alt: {
      Re alt{Re::Kind::alt, {}, {}, 0, {}};
      for (const Re& k : r.kids)
        if (std::optional<Re> n = non_empty(k)) alt.kids.push_back(std::move(*n));
      if (alt.kids.empty()) return std::nullopt;
      if (alt.kids.size() == 1) return alt.kids[0];
      return alt;
    }
    case Re::Kind::rep: {
      if (r.max && *r.max == 0) return std::nullopt;
      std::optional<Re> inner = non_empty(r.kids[0]);
      if (!inner) return std::nullopt;
      // x{m,n} with x nullable is x{0,n}; without the empty string, 1 to n non-empty pieces.
      return Re{Re::Kind::rep, {}, {std::move(*inner)}, 1, r.max};
    }
  }
  return std::nullopt;
}

// One top-level alternative of a pattern, with its anchors.
struct TopAlt {
  Re body;
  bool start = false, end = false;
};

class PatternParser {
 public:
  PatternParser(const std::string& pattern, const std::string& ptr) : pattern_(pattern), ptr_(ptr) {
    for (size_t i = 0; i < pattern.size();) {
      const auto b = uint8_t(pattern[i]);
      const size_t n = b < 0x80         ? 1
                       : (b >> 5) == 6  ? 2
                       : (b >> 4) == 14 ? 3
                       : (b >> 3) == 30 ? 4
                                        : 0;
      if (n == 0 || i + n > pattern.size()) bad("invalid UTF-8");
      uint32_t c = n == 1 ? b : n == 2 ? (b & 0x1Fu) : n == 3 ? (b & 0x0Fu) : (b & 0x07u);
      for (size_t k = 1; k < n; ++k) c = (c << 6) | (uint8_t(pattern[i + k]) & 0x3Fu);
      cps_.push_back(c);
      i += n;
    }
  }

  std::vector<TopAlt> parse() {
    std::vector<TopAlt> alts;
    for (;;) {
      TopAlt a;
      if (peek() == '^') {
        ++pos_;
        a.start = true;
      }
      a.body = parse_seq(true, &a.end);
      alts.push_back(std::move(a));
      if (at_end()) break;
      if (peek() == '|') {
        ++pos_;
        continue;
      }
      bad("an unmatched ')'");
    }
    return alts;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail(fmt::format("pattern '{}' at {}: {}", pattern_, where(ptr_), what));
  }
  [[noreturn]] void unsupported(const std::string& what) const { bad(what + " is not supported"); }
  bool at_end() const { return pos_ >= cps_.size(); }
  uint32_t peek(size_t ahead = 0) const {
    return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : uint32_t(-1);
  }

  Re parse_alt() {
    Re alt{Re::Kind::alt, {}, {}, 0, {}};
    for (;;) {
      alt.kids.push_back(parse_seq(false, nullptr));
      if (peek() != '|') break;
      ++pos_;
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  Re parse_seq(bool top, bool* end_anchor) {
    Re s{Re::Kind::seq, {}, {}, 0, {}};
    while (!at_end() && peek() != '|' && peek() != ')') {
      const uint32_t c = peek();
      if (c == '$') {
        if (top && (pos_ + 1 == cps_.size() || cps_[pos_ + 1] == '|')) {
          ++pos_;
          *end_anchor = true;
          break;
        }
        unsupported("'$' inside the pattern (anchors only at its ends)");
      }
      if (c == '^') unsupported("'^' inside the pattern (anchors only at its ends)");
      Re atom = parse_atom();
      s.kids.push_back(parse_quantifier(std::move(atom)));
    }
    if (s.kids.size() == 1) return std::move(s.kids[0]);
    return s;
  }

  static Re one(Ranges r) { return Re{Re::Kind::set, normalized(std::move(r)), {}, 0, {}}; }
  static Re one(uint32_t c) { return one(Ranges{{c, c}}); }

  // {m}, {m,} or {m,n} at the position (on its '{'): whether it is one, its counts (hi 0 with
  // `bounded` false: no bound) and its length.
  struct Braces {
    bool ok = false, bounded = true;
    uint64_t lo = 0, hi = 0;
    size_t len = 0;
  };
  Braces braces() const {
    Braces b;
    size_t i = pos_ + 1;
    auto number = [&](uint64_t& v) {
      const size_t start = i;
      v = 0;
      while (i < cps_.size() && cps_[i] >= '0' && cps_[i] <= '9') {
        v = std::min<uint64_t>(v * 10 + (cps_[i] - '0'), uint64_t(1) << 40);
        ++i;
      }
      return i > start;
    };
    if (!number(b.lo)) return b;
    b.hi = b.lo;
    if (i < cps_.size() && cps_[i] == ',') {
      ++i;
      b.bounded = number(b.hi);
    }
    if (i >= cps_.size() || cps_[i] != '}') return b;
    b.len = i + 1 - pos_;
    b.ok = true;
    return b;
  }

  Re parse_atom() {
    const uint32_t c = cps_[pos_++];
    switch (c) {
      case '(': {
        if (peek() == '?') {
          if (peek(1) == ':') {
            pos_ += 2;
          } else if (peek(1) == '=' || peek(1) == '!') {
            unsupported(fmt::format("lookahead '(?{}'", char(peek(1))));
          } else if (peek(1) == '<' && (peek(2) == '=' || peek(2) == '!')) {
            unsupported(fmt::format("lookbehind '(?<{}'", char(peek(2))));
          } else if (peek(1) == '<') {
            // A named group: the name does not matter to the language.
            pos_ += 2;
            while (!at_end() && peek() != '>') ++pos_;
            if (at_end()) bad("a group name without its '>'");
            ++pos_;
          } else {
            unsupported("the group '(?'");
          }
        }
        Re inner = parse_alt();
        if (peek() != ')') bad("a '(' without its ')'");
        ++pos_;
        return inner;
      }
      case '[':
        return parse_class();
      case '.':
        return one(complement(kLineTerminator));
      case '\\': {
        Ranges r = parse_escape(false);
        return one(std::move(r));
      }
      case '*':
      case '+':
      case '?':
        bad(fmt::format("'{}' repeats nothing", char(c)));
      case '{': {
        --pos_;
        if (braces().ok) bad("a '{' quantifier repeats nothing");
        ++pos_;
        return one(c);
      }
      default:
        return one(c);
    }
  }

  Re parse_quantifier(Re atom) {
    const uint32_t c = peek();
    uint64_t lo = 0;
    std::optional<uint64_t> hi;
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      ++pos_, lo = 1;
    } else if (c == '?') {
      ++pos_, hi = 1;
    } else if (c == '{') {
      const Braces b = braces();
      if (!b.ok) return atom;  // a literal '{', read as the next atom
      pos_ += b.len;
      lo = b.lo;
      if (b.bounded) hi = b.hi;
      if (hi && *hi < lo) bad("a quantifier {m,n} with n below m");
      if (lo > kMaxCount || (hi && *hi > kMaxCount))
        unsupported(fmt::format("a repetition count over {}", kMaxCount));
    } else {
      return atom;
    }
    if (peek() == '?') unsupported("the lazy quantifier '?' after a quantifier");
    if (peek() == '*' || peek() == '+') bad("a quantifier repeats a quantifier");
    if (peek() == '{' && braces().ok) bad("a quantifier repeats a quantifier");
    return Re{Re::Kind::rep, {}, {std::move(atom)}, lo, hi};
  }

  Re parse_class() {
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges set;
    if (peek() == ']') {
      ++pos_;
      if (!negated) bad("the empty class '[]' matches nothing");
      return one(Ranges{{0, kMaxCodePoint}});
    }
    while (peek() != ']') {
      if (at_end()) bad("a '[' without its ']'");
      Ranges lo = class_atom();
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < cps_.size()) {
        ++pos_;
        Ranges hi = class_atom();
        if (lo.size() != 1 || lo[0].first != lo[0].second || hi.size() != 1 ||
            hi[0].first != hi[0].second)
          unsupported("a range with a class escape at an end");
        if (hi[0].first < lo[0].first) bad("a range whose end is before its start");
        set.emplace_back(lo[0].first, hi[0].first);
      } else {
        set.insert(set.end(), lo.begin(), lo.end());
      }
    }
    ++pos_;
    set = normalized(set);
    if (negated) set = complement(set);
    if (set.empty()) bad("a class that matches nothing");
    return one(std::move(set));
  }

  Ranges class_atom() {
    const uint32_t c = cps_[pos_++];
    if (c == '\\') return parse_escape(true);
    return Ranges{{c, c}};
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const uint32_t c = peek();
      const int d = c >= '0' && c <= '9'   ? int(c - '0')
                    : c >= 'a' && c <= 'f' ? int(c - 'a' + 10)
                    : c >= 'A' && c <= 'F' ? int(c - 'A' + 10)
                                           : -1;
      if (d < 0) bad(fmt::format("expected {} hex digits in an escape", digits));
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    return v;
  }

  // After a backslash: the code points the escape stands for.
  Ranges parse_escape(bool in_class) {
    if (at_end()) bad("a '\\' at the end");
    const uint32_t e = cps_[pos_++];
    const auto single = [](uint32_t c) { return Ranges{{c, c}}; };
    switch (e) {
      case 'd':
        return kDigit;
      case 'D':
        return complement(kDigit);
      case 'w':
        return kWord;
      case 'W':
        return complement(kWord);
      case 's':
        return kSpace;
      case 'S':
        return complement(kSpace);
      case 'b':
        if (in_class) return single(0x08);
        unsupported("the word boundary '\\b'");
      case 'B':
        unsupported("the word boundary '\\B'");
      case 'n':
        return single('\n');
      case 'r':
        return single('\r');
      case 't':
        return single('\t');
      case 'f':
        return single('\f');
      case 'v':
        return single('\v');
      case '0':
        if (peek() >= '0' && peek() <= '9')
          unsupported("the octal escape '\\0" + utf8(peek()) + "'");
        return single(0);
      case 'k':
        unsupported("the named backreference '\\k'");
      case 'p':
      case 'P':
        unsupported(fmt::format("the Unicode property escape '\\{}'", char(e)));
      case 'x':
        return single(hex(2));
      case 'u': {
        if (peek() == '{') unsupported("the escape '\\u{...}'");
        uint32_t c = hex(4);
        if (c >= 0xD800 && c <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
          const size_t save = pos_;
          pos_ += 2;
          const uint32_t low = hex(4);
          if (low >= 0xDC00 && low <= 0xDFFF)
            c = 0x10000 + ((c - 0xD800) << 10) + (low - 0xDC00);
          else
            pos_ = save;
        }
        if (c >= 0xD800 && c <= 0xDFFF) unsupported("a lone surrogate escape");
        return single(c);
      }
      case 'c': {
        const uint32_t l = peek();
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z'))) bad("'\\c' without a letter");
        ++pos_;
        return single(l % 32);
      }
      default:
        if (e >= '1' && e <= '9') unsupported(fmt::format("the backreference '\\{}'", char(e)));
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
          unsupported(fmt::format("the escape '\\{}'", char(e)));
        return single(e);
    }
  }

  const std::string& pattern_;
  const std::string& ptr_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
};

// ---- integer ranges ------------------------------------------------------------------------

std::string digits(size_t n) {
  if (n == 0) return "";
  if (n == 1) return "[0-9]";
  return fmt::format("[0-9]{{{}}}", n);
}

std::string digit_set(char lo, char hi) {
  if (lo == hi) return lit(std::string(1, lo));
  return fmt::format("[{}-{}]", lo, hi);
}

// Decimal strings of the same length from a to b (a <= b), as a GBNF sequence.
std::string same_length(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && a[i] == b[i]) ++i;
  const std::string prefix = i ? lit(a.substr(0, i)) : "";
  if (i == a.size()) return prefix;
  const char x = a[i], y = b[i];
  const size_t n = a.size() - i - 1;
  const std::string ra = a.substr(i + 1), rb = b.substr(i + 1);
  const bool low_full = ra.find_first_not_of('0') == std::string::npos;
  const bool high_full = rb.find_first_not_of('9') == std::string::npos;
  std::vector<std::string> alts;
  char mid_lo = x, mid_hi = y;
  if (!low_full) {
    alts.push_back(seq(lit(std::string(1, x)), same_length(ra, std::string(n, '9'))));
    ++mid_lo;
  }
  if (!high_full) --mid_hi;
  if (mid_lo <= mid_hi) alts.push_back(seq(digit_set(mid_lo, mid_hi), digits(n)));
  if (!high_full) alts.push_back(seq(lit(std::string(1, y)), same_length(std::string(n, '0'), rb)));
  return seq(prefix, alternatives(alts));
}

// The decimal numerals (no leading zeros) of [lo, hi], hi empty for no bound: alternatives.
std::vector<std::string> non_negative(uint64_t lo, std::optional<uint64_t> hi) {
  const std::string a = std::to_string(lo);
  std::vector<std::string> alts;
  if (hi) {
    const std::string b = std::to_string(*hi);
    if (a.size() == b.size()) return {same_length(a, b)};
    alts.push_back(same_length(a, std::string(a.size(), '9')));
    if (b.size() - a.size() >= 2)
      alts.push_back(a.size() == b.size() - 2
                         ? fmt::format("[1-9] {}", digits(a.size()))
                         : fmt::format("[1-9] [0-9]{{{},{}}}", a.size(), b.size() - 2));
    std::string power(b.size(), '0');  // 10^(digits of b - 1)
    power[0] = '1';
    alts.push_back(same_length(power, b));
  } else {
    // No bound: longer numerals up to kMaxDigits digits.
    alts.push_back(same_length(a, std::string(a.size(), '9')));
    if (a.size() + 1 < kMaxDigits)
      alts.push_back(fmt::format("[1-9] [0-9]{{{},{}}}", a.size(), kMaxDigits - 1));
    else if (a.size() + 1 == kMaxDigits)
      alts.push_back(fmt::format("[1-9] {}", digits(a.size())));
  }
  return alts;
}

// ---- the compiler --------------------------------------------------------------------------

class Compiler {
 public:
  // A rule named `name` (not taken yet) for the instances of `schema`, whose references
  // resolve in `schema`.
  // `doc`: the document that holds `schema`, where its references resolve (null: itself).
  void add(const ojson& schema, const std::string& name, const ojson* doc = nullptr) {
    root_ = doc ? doc : &schema;
    refs_.clear();
    names_.insert(name);
    order_.push_back(name);
    if (root_ == &schema) refs_["#"] = name;
    bodies_[name] = body(schema, "", name);
    root_ = nullptr;
  }

  // A rule named `name` for one primitive (object, value, string, ...).
  void add_primitive(const std::string& name, const std::string& primitive) {
    names_.insert(name);
    order_.push_back(name);
    bodies_[name] = prim(primitive);
  }

  // A name no rule of the compiler's has or will have.
  std::string reserve(const std::string& hint) { return unique_name(hint); }

  std::string text() const {
    std::string out;
    for (const std::string& n : order_) out += n + " ::= " + bodies_.at(n) + "\n";
    for (const Primitive& p : primitives())
      if (used_.count(p.name)) out += std::string(p.name) + " ::= " + p.body + "\n";
    return out;
  }

 private:
  std::string prim(const std::string& name) {
    if (used_.insert(name).second)
      for (const Primitive& p : primitives())
        if (name == p.name)
          for (const char* d : p.deps) prim(d);
    return name;
  }

  static std::string sanitize(const std::string& hint) {
    std::string out;
    for (const char c : hint) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      if (ok)
        out += c;
      else if (!out.empty() && out.back() != '-')
        out += '-';
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    if (out.size() > 60) out.resize(60);
    return out.empty() ? "rule" : out;
  }

  std::string unique_name(const std::string& hint) {
    const std::string base = sanitize(hint);
    std::string name = base;
    for (int i = 2; names_.count(name) || is_primitive(name); ++i)
      name = fmt::format("{}-{}", base, i);
    names_.insert(name);
    return name;
  }

  // A rule with this body (an earlier one with the same body is reused).
  std::string rule(const std::string& hint, const std::string& body) {
    if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
    const std::string name = unique_name(hint);
    order_.push_back(name);
    bodies_[name] = body;
    by_body_[body] = name;
    return name;
  }

  static bool is_name(const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '-' || c == '_';
    });
  }

  // Whether this GBNF text is one item (a name, a set or a literal), which a quantifier may
  // follow without parentheses.
  static bool is_item(const std::string& s) {
    if (is_name(s)) return true;
    if (s.size() < 2 || s.find(' ') != std::string::npos) return false;
    return (s.front() == '[' && s.back() == ']') || (s.front() == '"' && s.back() == '"');
  }

  // The schema as one GBNF item: a rule name (a rule made for it when needed).
  std::string item(const ojson& s, const std::string& ptr, const std::string& hint) {
    const std::string b = body(s, ptr, hint);
    return is_name(b) ? b : rule(hint, b);
  }

  // ---- schema dispatch ----

  std::string body(const ojson& s, const std::string& ptr, const std::string& hint) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return prim("value");
      fail(fmt::format("the schema false at {} admits no value", where(ptr)));
    }
    if (!s.is_object())
      fail(fmt::format("the schema at {} is not an object or a boolean", where(ptr)));
    check_keywords(s, ptr);
    const ojson c = constraints(s);
    if (c.contains("$ref")) {
      const std::string ref = ref_text(c["$ref"], ptr);
      ojson rest = c;
      rest.erase("$ref");
      if (rest.empty()) return ref_rule(ref, ptr);
      return body(merged({s}, ptr), ptr, hint);
    }
    if (c.contains("allOf")) return body(merged({s}, ptr), ptr, hint);
    if (c.contains("anyOf") && c.contains("oneOf"))
      fail(fmt::format("'anyOf' beside 'oneOf' at {} is not supported", where(ptr)));
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!c.contains(key)) continue;
      const ojson& branches = c[key];
      if (!branches.is_array() || branches.empty())
        fail(fmt::format("'{}' at {} must be a non-empty array", key, where(ptr)));
      ojson rest = c;
      rest.erase(key);
      std::vector<std::string> alts;
      for (size_t i = 0; i < branches.size(); ++i) {
        const std::string bptr = child(child(ptr, key), std::to_string(i));
        const std::string bhint = fmt::format("{}-{}", hint, i);
        if (rest.empty()) {
          alts.push_back(item(branches[i], bptr, bhint));
        } else {
          const ojson branch = merged({rest, branches[i]}, bptr);
          alts.push_back(item(branch, bptr, bhint));
        }
      }
      return join(alts, " | ");
    }
    if (c.contains("enum") || c.contains("const")) return enum_body(c, ptr);
    const std::vector<std::string> types = type_list(c, ptr);
    if (types.empty()) return prim("value");
    std::vector<std::string> alts;
    for (const std::string& t : types) {
      const std::string th = types.size() == 1 ? hint : hint + "-" + t;
      if (t == "null") {
        alts.push_back(prim("null"));
      } else if (t == "boolean") {
        alts.push_back(prim("boolean"));
      } else if (t == "number") {
        for (const std::string& k : kNumberKeys)
          if (c.contains(k))
            fail(
                fmt::format("'{}' at {} on a number that need not be an integer is not supported "
                            "(only with \"type\": \"integer\")",
                            k, where(ptr)));
        alts.push_back(prim("number"));
      } else if (t == "integer") {
        alts.push_back(integer_body(c, ptr));
      } else if (t == "string") {
        alts.push_back(string_body(c, ptr, th));
      } else if (t == "object") {
        alts.push_back(object_body(c, ptr, th));
      } else {
        alts.push_back(array_body(c, ptr, th));
      }
    }
    if (alts.size() == 1) return alts[0];
    for (std::string& a : alts)
      if (!is_name(a)) a = rule(hint + "-alt", a);
    return join(alts, " | ");
  }

  static void check_keywords(const ojson& s, const std::string& ptr) {
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!is_annotation(it.key()) && !keywords().count(it.key()))
        fail(fmt::format("'{}' at {} is not supported", it.key(), where(ptr)));
  }

  // The types the schema allows, in the order given; empty: any value.
  static std::vector<std::string> type_list(const ojson& c, const std::string& ptr) {
    std::vector<std::string> types;
    if (c.contains("type")) {
      const ojson& t = c["type"];
      std::vector<ojson> names;
      if (t.is_string())
        names.push_back(t);
      else if (t.is_array() && !t.empty())
        names.assign(t.begin(), t.end());
      else
        fail(fmt::format("'type' at {} must be a type name or a non-empty list of them",
                         where(ptr)));
      for (const ojson& n : names) {
        if (!n.is_string() ||
            std::find(kTypes.begin(), kTypes.end(), n.get<std::string>()) == kTypes.end())
          fail(fmt::format("type {} at {} is not a JSON Schema type", compact(n), where(ptr)));
        if (std::find(types.begin(), types.end(), n.get<std::string>()) == types.end())
          types.push_back(n.get<std::string>());
      }
    } else {
      const auto any_of = [&](const std::set<std::string>& keys) {
        return std::any_of(keys.begin(), keys.end(),
                           [&](const std::string& k) { return c.contains(k); });
      };
      if (any_of(kObjectKeys)) types.push_back("object");
      if (any_of(kArrayKeys)) types.push_back("array");
      if (any_of(kStringKeys)) types.push_back("string");
      if (any_of(kNumberKeys)) types.push_back("number");
    }
    // A number covers the integers.
    if (std::find(types.begin(), types.end(), "number") != types.end())
      types.erase(std::remove(types.begin(), types.end(), "integer"), types.end());
    return types;
  }

  static bool has_type(const ojson& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "string") return v.is_string();
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "number") return v.is_number();
    if (v.is_number_integer()) return true;
    if (!v.is_number_float()) return false;
    const double d = v.get<double>();
    return std::isfinite(d) && d == std::floor(d);
  }

  std::string enum_body(const ojson& c, const std::string& ptr) {
    for (auto it = c.begin(); it != c.end(); ++it)
      if (it.key() != "enum" && it.key() != "const" && it.key() != "type")
        fail(fmt::format("'{}' beside '{}' at {} is not supported", it.key(),
                         c.contains("enum") ? "enum" : "const", where(ptr)));
    std::vector<ojson> values;
    if (c.contains("enum")) {
      if (!c["enum"].is_array() || c["enum"].empty())
        fail(fmt::format("'enum' at {} must be a non-empty array", where(ptr)));
      values.assign(c["enum"].begin(), c["enum"].end());
    }
    if (c.contains("const")) {
      if (c.contains("enum")) {
        if (std::find(values.begin(), values.end(), c["const"]) == values.end())
          values.clear();
        else
          values = {c["const"]};
      } else {
        values = {c["const"]};
      }
    }
    if (c.contains("type")) {
      const std::vector<std::string> types = type_list(c, ptr);
      values.erase(std::remove_if(values.begin(), values.end(),
                                  [&](const ojson& v) {
                                    return std::none_of(
                                        types.begin(), types.end(),
                                        [&](const std::string& t) { return has_type(v, t); });
                                  }),
                   values.end());
    }
    if (values.empty())
      fail(fmt::format("no value of 'enum'/'const' at {} is allowed by the schema", where(ptr)));
    std::vector<std::string> alts;
    for (const ojson& v : values) {
      std::string l = lit(compact(v));
      if (std::find(alts.begin(), alts.end(), l) == alts.end()) alts.push_back(std::move(l));
    }
    return join(alts, " | ");
  }

  // ---- $ref ----

  static std::string ref_text(const ojson& ref, const std::string& ptr) {
    if (!ref.is_string()) fail(fmt::format("'$ref' at {} must be a string", where(ptr)));
    return ref.get<std::string>();
  }

  // The schema a local reference names, and its JSON pointer.
  std::pair<const ojson*, std::string> resolve(const std::string& ref, const std::string& ptr) {
    if (ref.empty() || ref[0] != '#')
      fail(
          fmt::format("'$ref' '{}' at {} is not supported (only local references: #/$defs/NAME, "
                      "#/definitions/NAME)",
                      ref, where(ptr)));
    std::string pointer;
    for (size_t i = 1; i < ref.size(); ++i) {
      if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(uint8_t(ref[i + 1])) &&
          std::isxdigit(uint8_t(ref[i + 2]))) {
        pointer += char(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        pointer += ref[i];
      }
    }
    if (!pointer.empty() && pointer[0] != '/')
      fail(fmt::format("'$ref' '{}' at {} is not supported (anchors are not; use a JSON pointer)",
                       ref, where(ptr)));
    try {
      const ojson::json_pointer jp(pointer);
      if (root_->contains(jp)) return {&root_->at(jp), pointer};
    } catch (const nlohmann::json::exception&) {
    }
    fail(fmt::format("'$ref' '{}' at {} does not resolve", ref, where(ptr)));
  }

  std::string ref_rule(const std::string& ref, const std::string& ptr) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const auto [target, pointer] = resolve(ref, ptr);
    std::string hint = "ref-" + pointer;
    for (const char* prefix : {"/$defs/", "/definitions/"}) {
      const std::string p = prefix;
      if (pointer.rfind(p, 0) == 0 && pointer.find('/', p.size()) == std::string::npos)
        hint = "def-" + pointer.substr(p.size());
    }
    const std::string name = unique_name(hint);
    refs_[ref] = name;
    order_.push_back(name);
    bodies_[name] = body(*target, pointer, name);
    return name;
  }

  // ---- allOf and sibling keywords: one schema from several ----

  // The parts' constraints as plain schemas (no $ref, no allOf), appended to `out`.
  void flatten(const ojson& s, const std::string& ptr, std::vector<ojson>& out, int depth) {
    if (depth > kMaxMergeDepth)
      fail(fmt::format("'$ref'/'allOf' at {} nest deeper than {} (a reference cycle?)", where(ptr),
                       kMaxMergeDepth));
    if (s.is_boolean()) {
      if (s.get<bool>()) return;
      fail(fmt::format("the schema false at {} admits no value", where(ptr)));
    }
    if (!s.is_object())
      fail(fmt::format("the schema at {} is not an object or a boolean", where(ptr)));
    check_keywords(s, ptr);
    ojson c = constraints(s);
    if (c.contains("$ref")) {
      const auto [target, pointer] = resolve(ref_text(c["$ref"], ptr), ptr);
      c.erase("$ref");
      flatten(*target, pointer, out, depth + 1);
    }
    if (c.contains("allOf")) {
      const ojson parts = c["allOf"];
      c.erase("allOf");
      if (!parts.is_array() || parts.empty())
        fail(fmt::format("'allOf' at {} must be a non-empty array", where(ptr)));
      for (size_t i = 0; i < parts.size(); ++i)
        flatten(parts[i], child(child(ptr, "allOf"), std::to_string(i)), out, depth + 1);
    }
    if (c.contains("const")) {
      ojson e = ojson::array({c["const"]});
      c.erase("const");
      if (c.contains("enum")) {
        out.push_back(ojson{{"enum", e}});
      } else {
        c["enum"] = e;
      }
    }
    if (!c.empty()) out.push_back(std::move(c));
  }

  static std::set<std::string> type_set(const ojson& t) {
    std::set<std::string> out;
    if (t.is_string()) out.insert(t.get<std::string>());
    if (t.is_array())
      for (const ojson& n : t)
        if (n.is_string()) out.insert(n.get<std::string>());
    return out;
  }

  ojson merged(const std::vector<ojson>& schemas, const std::string& ptr) {
    std::vector<ojson> parts;
    for (const ojson& s : schemas) flatten(s, ptr, parts, 0);
    if (parts.empty()) return ojson::object();
    if (parts.size() == 1) return parts[0];
    // additionalProperties only sees its own schema's properties: a part that restricts them
    // must list every property the others bring.
    std::vector<std::string> names;
    for (const ojson& p : parts) {
      if (p.contains("properties") && p["properties"].is_object())
        for (auto it = p["properties"].begin(); it != p["properties"].end(); ++it)
          names.push_back(it.key());
      if (p.contains("required") && p["required"].is_array())
        for (const ojson& r : p["required"])
          if (r.is_string()) names.push_back(r.get<std::string>());
    }
    std::optional<ojson> restrictive;
    bool open = false;
    for (const ojson& p : parts) {
      if (!p.contains("additionalProperties")) continue;
      const ojson& ap = p["additionalProperties"];
      if (ap == ojson(true)) {
        open = true;
        continue;
      }
      for (const std::string& n : names)
        if (!p.contains("properties") || !p["properties"].is_object() ||
            !p["properties"].contains(n))
          fail(
              fmt::format("'allOf' at {}: a part's 'additionalProperties' refuses the property "
                          "'{}' another part names (not supported)",
                          where(ptr), n));
      if (restrictive && *restrictive != ap)
        fail(
            fmt::format("'allOf' at {}: parts with different 'additionalProperties' are not "
                        "supported",
                        where(ptr)));
      restrictive = ap;
    }
    // prefixItems/items/additionalItems depend on each other: from one part only.
    const ojson* array_part = nullptr;
    for (const ojson& p : parts) {
      ojson a = ojson::object();
      for (const char* k : {"items", "prefixItems", "additionalItems"})
        if (p.contains(k)) a[k] = p[k];
      if (a.empty()) continue;
      if (array_part) {
        ojson b = ojson::object();
        for (const char* k : {"items", "prefixItems", "additionalItems"})
          if (array_part->contains(k)) b[k] = (*array_part)[k];
        if (a != b)
          fail(fmt::format("'allOf' at {}: item schemas in two parts are not supported",
                           where(ptr)));
      }
      array_part = &p;
    }
    ojson out = ojson::object();
    for (const ojson& p : parts) {
      for (auto it = p.begin(); it != p.end(); ++it) {
        const std::string& k = it.key();
        const ojson& v = it.value();
        if (k == "additionalProperties") continue;
        if (!out.contains(k)) {
          out[k] = v;
          continue;
        }
        ojson& o = out[k];
        if (o == v) continue;
        if (k == "type") {
          std::set<std::string> a = type_set(o), b = type_set(v);
          if (a.count("number")) a.insert("integer");
          if (b.count("number")) b.insert("integer");
          ojson both = ojson::array();
          for (const std::string& t : kTypes)
            if (a.count(t) && b.count(t)) both.push_back(t);
          if (both.empty())
            fail(fmt::format("'allOf' at {}: no type is allowed by every part", where(ptr)));
          o = both.size() == 1 ? both[0] : both;
        } else if (k == "properties" && o.is_object() && v.is_object()) {
          for (auto pit = v.begin(); pit != v.end(); ++pit) {
            if (!o.contains(pit.key()))
              o[pit.key()] = pit.value();
            else if (o[pit.key()] != pit.value())
              o[pit.key()] =
                  merged({o[pit.key()], pit.value()}, child(child(ptr, "properties"), pit.key()));
          }
        } else if (k == "required" && o.is_array() && v.is_array()) {
          for (const ojson& r : v)
            if (std::find(o.begin(), o.end(), r) == o.end()) o.push_back(r);
        } else if (k == "enum" && o.is_array() && v.is_array()) {
          ojson both = ojson::array();
          for (const ojson& e : o)
            if (std::find(v.begin(), v.end(), e) != v.end()) both.push_back(e);
          if (both.empty())
            fail(fmt::format("'allOf' at {}: no value is in every part's 'enum'", where(ptr)));
          o = both;
        } else if ((k == "minimum" || k == "exclusiveMinimum" || k == "minLength" ||
                    k == "minItems" || k == "minProperties") &&
                   o.is_number() && v.is_number()) {
          if (v > o) o = v;
        } else if ((k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" ||
                    k == "maxItems" || k == "maxProperties") &&
                   o.is_number() && v.is_number()) {
          if (v < o) o = v;
        } else {
          fail(fmt::format("'{}' differs between the parts of 'allOf' at {} (not supported)", k,
                           where(ptr)));
        }
      }
    }
    if (restrictive)
      out["additionalProperties"] = *restrictive;
    else if (open)
      out["additionalProperties"] = true;
    return out;
  }

  // ---- integers ----

  static int64_t bound(const ojson& v, const char* key, const std::string& ptr, bool up) {
    if (!v.is_number()) fail(fmt::format("'{}' at {} must be a number", key, where(ptr)));
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(kMaxBound))
      fail(fmt::format("'{}' {} at {} is out of the supported range", key, compact(v), where(ptr)));
    if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      if (i > kMaxBound || i < -kMaxBound)
        fail(fmt::format("'{}' {} at {} is out of the supported range", key, compact(v),
                         where(ptr)));
      return i;
    }
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > double(kMaxBound))
      fail(fmt::format("'{}' {} at {} is out of the supported range", key, compact(v), where(ptr)));
    return int64_t(up ? std::ceil(d) : std::floor(d));
  }

  static bool is_integral(const ojson& v) {
    if (v.is_number_integer()) return true;
    if (!v.is_number_float()) return false;
    const double d = v.get<double>();
    return std::isfinite(d) && d == std::floor(d);
  }

  std::string integer_body(const ojson& c, const std::string& ptr) {
    if (c.contains("multipleOf")) {
      const ojson& m = c["multipleOf"];
      if (!(m.is_number() && is_integral(m) && m.get<double>() == 1.0))
        fail(fmt::format("'multipleOf' {} at {} is not supported", compact(m), where(ptr)));
    }
    std::optional<int64_t> lo, hi;
    const auto raise = [&](int64_t v) { lo = lo ? std::max(*lo, v) : v; };
    const auto lower = [&](int64_t v) { hi = hi ? std::min(*hi, v) : v; };
    const bool draft4_min = c.contains("exclusiveMinimum") && c["exclusiveMinimum"].is_boolean();
    const bool draft4_max = c.contains("exclusiveMaximum") && c["exclusiveMaximum"].is_boolean();
    if (c.contains("minimum")) {
      const ojson& v = c["minimum"];
      if (draft4_min && c["exclusiveMinimum"].get<bool>())
        raise(bound(v, "minimum", ptr, false) + 1);
      else
        raise(bound(v, "minimum", ptr, true));
    }
    if (c.contains("maximum")) {
      const ojson& v = c["maximum"];
      if (draft4_max && c["exclusiveMaximum"].get<bool>())
        lower(bound(v, "maximum", ptr, true) - 1);
      else
        lower(bound(v, "maximum", ptr, false));
    }
    if (c.contains("exclusiveMinimum") && !draft4_min)
      raise(bound(c["exclusiveMinimum"], "exclusiveMinimum", ptr, false) + 1);
    if (c.contains("exclusiveMaximum") && !draft4_max)
      lower(bound(c["exclusiveMaximum"], "exclusiveMaximum", ptr, true) - 1);
    if (!lo && !hi) return prim("integer");
    if (lo && hi && *lo > *hi)
      fail(fmt::format("no integer is within the bounds at {}", where(ptr)));
    std::vector<std::string> alts;
    if (!lo || *lo < 0) {
      const uint64_t mag_lo = hi && *hi < 0 ? uint64_t(-*hi) : 1;
      std::optional<uint64_t> mag_hi;
      if (lo) mag_hi = uint64_t(-*lo);
      alts.push_back("\"-\" " + alternatives(non_negative(mag_lo, mag_hi)));
    }
    if (!hi || *hi >= 0) {
      std::optional<uint64_t> top;
      if (hi) top = uint64_t(*hi);
      for (std::string& a : non_negative(lo && *lo > 0 ? uint64_t(*lo) : 0, top))
        alts.push_back(std::move(a));
    }
    return join(alts, " | ");
  }

  // ---- strings ----

  static uint64_t count(const ojson& c, const char* key, const std::string& ptr) {
    const ojson& v = c[key];
    if (!is_integral(v) || v.get<double>() < 0)
      fail(fmt::format("'{}' at {} must be a non-negative integer", key, where(ptr)));
    if (v.get<double>() > double(kMaxCount))
      fail(fmt::format("'{}' {} at {} is over {} (not supported)", key, compact(v), where(ptr),
                       kMaxCount));
    return v.get<uint64_t>();
  }

  std::string string_body(const ojson& c, const std::string& ptr, const std::string& hint) {
    const char* quote = R"("\"")";
    std::vector<std::string> given;
    for (const char* k : {"format", "pattern", "minLength", "maxLength"})
      if (c.contains(k)) given.push_back(k);
    const bool length = c.contains("minLength") || c.contains("maxLength");
    if (given.size() > 1 &&
        !(given.size() == 2 && length && !c.contains("format") && !c.contains("pattern")))
      fail(fmt::format("'{}' beside '{}' at {} is not supported", given[0], given[1], where(ptr)));
    if (c.contains("format")) {
      const ojson& f = c["format"];
      const std::string name = f.is_string() ? f.get<std::string>() : compact(f);
      if (name != "date" && name != "time" && name != "date-time" && name != "uuid")
        fail(
            fmt::format("format '{}' at {} is not supported (date, time, date-time and uuid "
                        "are)",
                        name, where(ptr)));
      return fmt::format("{} {} {}", quote, prim(name), quote);
    }
    if (c.contains("pattern")) {
      if (!c["pattern"].is_string())
        fail(fmt::format("'pattern' at {} must be a string", where(ptr)));
      return fmt::format("{} {} {}", quote,
                         pattern_body(c["pattern"].get<std::string>(), ptr, hint), quote);
    }
    if (!length) return prim("string");
    const uint64_t lo = c.contains("minLength") ? count(c, "minLength", ptr) : 0;
    std::optional<uint64_t> hi;
    if (c.contains("maxLength")) hi = count(c, "maxLength", ptr);
    if (hi && *hi < lo) fail(fmt::format("'maxLength' is below 'minLength' at {}", where(ptr)));
    return seq(seq(quote, repeat(prim("char"), lo, hi)), quote);
  }

  // A character of a JSON string whose value is in `set`: as itself where JSON allows it, else
  // as its escape.
  std::string json_char(const Ranges& set, const std::string& hint, const std::string& ptr) {
    const Ranges plain = subtract(set, kJsonSpecial);
    std::vector<std::string> alts;
    if (plain.size() == 1 && plain[0].first == plain[0].second) {
      alts.push_back(lit(utf8(plain[0].first)));
    } else if (!plain.empty()) {
      const Ranges outside = complement(plain);
      const std::string pos = set_text(plain, false), neg = set_text(outside, true);
      alts.push_back(neg.size() < pos.size() ? neg : pos);
    }
    if (has(set, '"')) alts.push_back(lit("\\\""));
    if (has(set, '\\')) alts.push_back(lit("\\\\"));
    std::string shorts;
    for (const auto& [c, e] : std::vector<std::pair<uint32_t, char>>{
             {0x08, 'b'}, {0x09, 't'}, {0x0A, 'n'}, {0x0C, 'f'}, {0x0D, 'r'}})
      if (has(set, c)) shorts += e;
    if (shorts.size() == 1) alts.push_back(lit(std::string("\\") + shorts));
    if (shorts.size() > 1) alts.push_back(lit("\\") + " [" + shorts + "]");
    // \u00XX for every control character in the set (either case of hex digit).
    std::vector<std::string> high;
    for (uint32_t h = 0; h < 2; ++h) {
      std::string low;
      for (uint32_t l = 0; l < 16; ++l) {
        if (!has(set, h * 16 + l)) continue;
        low += "0123456789abcdef"[l];
        if (l >= 10) low += "ABCDEF"[l - 10];
      }
      if (!low.empty()) high.push_back(lit(std::to_string(h)) + " [" + low + "]");
    }
    if (!high.empty()) alts.push_back(seq(lit("\\u00"), alternatives(high)));
    if (alts.empty()) fail(fmt::format("a class in the pattern at {} matches nothing", where(ptr)));
    if (alts.size() == 1 && alts[0].find(' ') == std::string::npos) return alts[0];
    return rule(hint + "-char", join(alts, " | "));
  }

  std::string emit(const Re& r, const std::string& hint, const std::string& ptr) {
    switch (r.kind) {
      case Re::Kind::set:
        return json_char(r.set, hint, ptr);
      case Re::Kind::seq: {
        std::string out;
        for (const Re& k : r.kids) out = seq(out, emit(k, hint, ptr));
        return out;
      }
      case Re::Kind::alt: {
        std::vector<std::string> alts;
        for (const Re& k : r.kids) alts.push_back(emit(k, hint, ptr));
        return alternatives(alts);
      }
      case Re::Kind::rep: {
        const Re* inner = &r.kids[0];
        std::optional<Re> ne;
        uint64_t lo = r.min;
        if (nullable(*inner)) {
          ne = non_empty(*inner);
          if (!ne) return "";
          inner = &*ne;
          lo = 0;
        }
        const std::string x = emit(*inner, hint, ptr);
        return repeat(is_item(x) ? x : "( " + x + " )", lo, r.max);
      }
    }
    return "";
  }

  std::string pattern_body(const std::string& pattern, const std::string& ptr,
                           const std::string& hint) {
    PatternParser parser(pattern, ptr);
    const std::vector<TopAlt> alts = parser.parse();
    std::vector<std::string> out;
    const auto any = [&] { return prim("char") + "*"; };
    for (const TopAlt& a : alts) {
      if (!a.start && !a.end && nullable(a.body)) {
        out.push_back(any());
        continue;
      }
      std::string s = emit(a.body, hint, ptr);
      if (!a.start) s = seq(any(), s);
      if (!a.end) s = seq(s, any());
      out.push_back(s);
    }
    return alternatives(out);
  }

  // ---- objects ----

  // A key (the text between the quotes) that is none of `names`, written without escapes: a
  // trie of the names whose every node also lets any other character leave it.
  std::string key_excluding(const std::vector<std::string>& names, const std::string& hint) {
    struct Node {
      std::map<uint32_t, size_t> next;
      bool terminal = false;
    };
    std::vector<Node> nodes(1);
    for (const std::string& n : names) {
      size_t at = 0;
      for (size_t i = 0; i < n.size();) {
        const auto b = uint8_t(n[i]);
        const size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
        uint32_t c = len == 1 ? b : len == 2 ? (b & 0x1Fu) : len == 3 ? (b & 0x0Fu) : (b & 0x07u);
        for (size_t k = 1; k < len && i + k < n.size(); ++k)
          c = (c << 6) | (uint8_t(n[i + k]) & 0x3Fu);
        i += len;
        // A character a key written without escapes cannot hold: no key here is this name.
        if (has(kJsonSpecial, c)) {
          at = SIZE_MAX;
          break;
        }
        auto it = nodes[at].next.find(c);
        if (it == nodes[at].next.end()) {
          nodes.push_back(Node{});
          it = nodes[at].next.emplace(c, nodes.size() - 1).first;
        }
        at = it->second;
      }
      if (at != SIZE_MAX) nodes[at].terminal = true;
    }
    const std::string base = unique_name(hint + "-key");
    std::vector<std::string> node_names(nodes.size());
    node_names[0] = base;
    for (size_t i = 1; i < nodes.size(); ++i) node_names[i] = unique_name(base);
    const std::string rest = prim("key-char") + "*";
    for (size_t i = 0; i < nodes.size(); ++i) {
      std::vector<std::string> alts;
      Ranges taken = kJsonSpecial;
      for (const auto& [c, n] : nodes[i].next) {
        alts.push_back(lit(utf8(c)) + " " + node_names[n]);
        taken.emplace_back(c, c);
      }
      alts.push_back(set_text(normalized(taken), true) + " " + rest);
      if (!nodes[i].terminal) alts.push_back("\"\"");
      order_.push_back(node_names[i]);
      bodies_[node_names[i]] = join(alts, " | ");
    }
    return base;
  }

  std::string object_body(const ojson& c, const std::string& ptr, const std::string& hint) {
    struct Prop {
      std::string name;
      ojson schema;
      std::string ptr;
      bool required = false;
    };
    std::vector<Prop> props;
    if (c.contains("properties")) {
      const ojson& p = c["properties"];
      if (!p.is_object()) fail(fmt::format("'properties' at {} must be an object", where(ptr)));
      for (auto it = p.begin(); it != p.end(); ++it)
        props.push_back({it.key(), it.value(), child(child(ptr, "properties"), it.key())});
    }
    // A bare object type is any object; with properties or required names, no others unless
    // additionalProperties allows them.
    if (!c.contains("properties") && !c.contains("required") &&
        !c.contains("additionalProperties") && !c.contains("maxProperties"))
      return prim("object");
    std::optional<ojson> extra;  // the schema of other keys (none: no other keys)
    if (c.contains("additionalProperties")) {
      const ojson& ap = c["additionalProperties"];
      if (!ap.is_boolean() && !ap.is_object())
        fail(fmt::format("'additionalProperties' at {} must be a schema", where(ptr)));
      if (ap != ojson(false)) extra = ap;
    }
    size_t n_required = 0;
    if (c.contains("required")) {
      const ojson& r = c["required"];
      if (!r.is_array()) fail(fmt::format("'required' at {} must be an array", where(ptr)));
      for (const ojson& n : r) {
        if (!n.is_string()) fail(fmt::format("'required' at {} must hold strings", where(ptr)));
        const std::string name = n.get<std::string>();
        auto it =
            std::find_if(props.begin(), props.end(), [&](const Prop& p) { return p.name == name; });
        if (it == props.end()) {
          if (c.contains("additionalProperties") && !extra)
            fail(
                fmt::format("'required' names '{}' at {}, which 'additionalProperties': false "
                            "refuses",
                            name, where(ptr)));
          props.push_back({name, extra ? *extra : ojson(true),
                           child(ptr, extra ? "additionalProperties" : "required"), false});
          it = props.end() - 1;
        }
        if (!it->required) ++n_required;
        it->required = true;
      }
    }
    if (c.contains("minProperties") && count(c, "minProperties", ptr) > n_required)
      fail(fmt::format("'minProperties' at {} is not supported (beyond the required properties)",
                       where(ptr)));
    if (c.contains("maxProperties") && (extra || count(c, "maxProperties", ptr) < props.size()))
      fail(fmt::format("'maxProperties' at {} is not supported (below the properties allowed)",
                       where(ptr)));
    std::vector<std::string> kvs;
    for (const Prop& p : props) {
      const std::string h = hint + "-" + p.name;
      const std::string value = item(p.schema, p.ptr, h);
      kvs.push_back(
          rule(h + "-kv", fmt::format("{} space \":\" space {}", lit(compact(p.name)), value)));
    }
    prim("space");
    std::string extra_kv;
    if (extra) {
      std::vector<std::string> names;
      for (const Prop& p : props) names.push_back(p.name);
      const std::string key =
          names.empty() ? prim("string") : "\"\\\"\" " + key_excluding(names, hint) + " \"\\\"\"";
      const std::string value =
          item(*extra, child(ptr, "additionalProperties"), hint + "-additional");
      extra_kv = rule(hint + "-additional-kv", fmt::format("{} space \":\" space {}", key, value));
    }
    // rest(i): properties i.. after one was written, each after a comma; the optional ones may
    // each be left out, in order. The object starts with the first property written: one of
    // those up to the first required one, or (none required) an additional one or nothing. Each
    // rest(i) that several of those starts share is a rule, so nothing is written twice.
    const size_t n = props.size();
    size_t first_required = 0;
    while (first_required < n && !props[first_required].required) ++first_required;
    const size_t starts = std::min(first_required + 1, n);
    std::vector<std::string> rest(n + 1), rest_ref(n + 1);
    for (size_t i = n + 1; i-- > 0;) {
      if (i == n) {
        rest[i] = extra ? fmt::format("( \",\" space {} space )*", extra_kv) : "";
      } else {
        const std::string one = fmt::format("\",\" space {} space", kvs[i]);
        rest[i] = seq(props[i].required ? one : "( " + one + " )?", rest_ref[i + 1]);
      }
      const bool shared = i >= 1 && i <= starts && (starts > 1 || first_required == n);
      rest_ref[i] = shared && !rest[i].empty() ? rule(hint + "-rest", rest[i]) : rest[i];
    }
    std::vector<std::string> firsts;
    for (size_t i = 0; i < starts; ++i) firsts.push_back(seq(kvs[i] + " space", rest_ref[i + 1]));
    if (first_required == n) {
      if (extra) firsts.push_back(seq(extra_kv + " space", rest[n]));
      firsts.push_back("");
    }
    const std::string first = firsts.size() == 1 && firsts[0].empty() ? "" : alternatives(firsts);
    return seq(seq("\"{\" space", first), "\"}\"");
  }

  // ---- arrays ----

  std::string array_body(const ojson& c, const std::string& ptr, const std::string& hint) {
    if (c.contains("uniqueItems") && c["uniqueItems"] != ojson(false))
      fail(fmt::format("'uniqueItems': {} at {} is not supported", compact(c["uniqueItems"]),
                       where(ptr)));
    std::vector<std::string> prefix;
    std::optional<std::string> rest;
    const auto rest_from = [&](const char* key) {
      if (!c.contains(key)) return std::optional<std::string>(prim("value"));
      if (c[key] == ojson(false)) return std::optional<std::string>();
      return std::optional<std::string>(item(c[key], child(ptr, key), hint + "-item"));
    };
    const auto prefix_from = [&](const char* key) {
      for (size_t i = 0; i < c[key].size(); ++i)
        prefix.push_back(item(c[key][i], child(child(ptr, key), std::to_string(i)),
                              fmt::format("{}-{}", hint, i)));
    };
    if (c.contains("prefixItems")) {
      if (!c["prefixItems"].is_array())
        fail(fmt::format("'prefixItems' at {} must be an array", where(ptr)));
      if (c.contains("additionalItems"))
        fail(
            fmt::format("'additionalItems' beside 'prefixItems' at {} is not supported (use "
                        "'items')",
                        where(ptr)));
      prefix_from("prefixItems");
      rest = rest_from("items");
    } else if (c.contains("items") && c["items"].is_array()) {
      prefix_from("items");  // draft 7's tuples
      rest = rest_from("additionalItems");
    } else {
      if (c.contains("additionalItems"))
        fail(fmt::format("'additionalItems' at {} is not supported without 'items' as a list",
                         where(ptr)));
      rest = rest_from("items");
    }
    const uint64_t min = c.contains("minItems") ? count(c, "minItems", ptr) : 0;
    std::optional<uint64_t> max;
    if (c.contains("maxItems")) max = count(c, "maxItems", ptr);
    if (!rest) max = std::min<uint64_t>(max.value_or(prefix.size()), prefix.size());
    if (max && min > *max)
      fail(fmt::format("'minItems' at {} is more than the array may hold", where(ptr)));
    prim("space");
    // Items i.. when i were written.
    std::function<std::string(size_t)> list = [&](size_t i) -> std::string {
      if (max && i >= *max) return "";
      const std::string sep = i == 0 ? "" : "\",\" space ";
      if (i < prefix.size()) {
        const std::string both = seq(sep + prefix[i] + " space", list(i + 1));
        return i < min ? both : "( " + both + " )?";
      }
      if (!rest) return "";
      const uint64_t lo = min > i ? min - i : 0;
      std::optional<uint64_t> hi;
      if (max) hi = *max - i;
      const std::string more = fmt::format("( \",\" space {} space )", *rest);
      if (i > 0) return repeat(more, lo, hi);
      std::optional<uint64_t> hi_more;
      if (hi) hi_more = *hi - 1;
      const std::string s = seq(*rest + " space", repeat(more, lo > 0 ? lo - 1 : 0, hi_more));
      return lo >= 1 ? s : "( " + s + " )?";
    };
    return seq(seq("\"[\" space", list(0)), "\"]\"");
  }

  const ojson* root_ = nullptr;  // the schema being added
  std::vector<std::string> order_;
  std::map<std::string, std::string> bodies_;
  std::map<std::string, std::string> by_body_;
  std::set<std::string> names_;
  std::set<std::string> used_;
  std::map<std::string, std::string> refs_;  // $ref text -> its rule
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  Compiler c;
  c.add(schema, "root");
  return c.text();
}

std::string json_schema_to_gbnf(const nlohmann::json& schema) {
  return json_schema_to_gbnf(nlohmann::ordered_json(schema));
}

std::string json_object_gbnf() {
  Compiler c;
  c.add_primitive("root", "object");
  return c.text();
}

std::string json_value_gbnf() {
  Compiler c;
  c.add_primitive("root", "value");
  return c.text();
}

struct SchemaRules::Impl {
  Compiler c;
};

SchemaRules::SchemaRules() : impl_(std::make_unique<Impl>()) {}
SchemaRules::~SchemaRules() = default;

std::string SchemaRules::add(const nlohmann::ordered_json& schema, const std::string& hint,
                             const nlohmann::ordered_json* doc) {
  const std::string name = impl_->c.reserve(hint);
  impl_->c.add(schema, name, doc);
  return name;
}

std::string SchemaRules::reserve(const std::string& hint) { return impl_->c.reserve(hint); }

std::string SchemaRules::gbnf() const { return impl_->c.text(); }

}  // namespace ps::grammar
