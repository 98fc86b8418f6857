#include "template/builtins.h"

#include <fmt/format.h>
#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>

namespace ps::jinja {
namespace {

[[noreturn]] void type_error(const std::string& msg) { throw TemplateError(msg); }

void check_size(size_t n) {
  if (n > kMaxValueBytes)
    throw TemplateError(fmt::format("a value would exceed {} MiB", kMaxValueBytes >> 20));
}

Value make_string(std::string s) {
  check_size(s.size());
  return Value::string(std::move(s));
}

// ---- Unicode case mapping: the C library's tables for UTF-8 -------------------------------

locale_t utf8_locale() {
  static locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", locale_t(0));
    return l;
  }();
  return loc;
}
uint32_t to_upper(uint32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  locale_t l = utf8_locale();
  return l ? uint32_t(towupper_l(wint_t(c), l)) : c;
}
uint32_t to_lower(uint32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  locale_t l = utf8_locale();
  return l ? uint32_t(towlower_l(wint_t(c), l)) : c;
}
bool is_alpha(uint32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  locale_t l = utf8_locale();
  return l && iswalpha_l(wint_t(c), l);
}
bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
bool is_upper(uint32_t c) { return to_lower(c) != c; }
bool is_lower(uint32_t c) { return to_upper(c) != c; }

std::string encode(const std::vector<uint32_t>& cps, size_t from = 0, size_t to = SIZE_MAX) {
  std::string out;
  to = std::min(to, cps.size());
  for (size_t k = from; k < to; ++k) append_utf8(out, cps[k]);
  return out;
}

std::string map_chars(const std::string& s, uint32_t (*f)(uint32_t)) {
  std::string out;
  for (uint32_t c : code_points(s)) append_utf8(out, f(c));
  return out;
}
// str.upper() with Python's special casings that grow a character (sharp s, ligatures).
std::string upper(const std::string& s) {
  std::string out;
  for (uint32_t c : code_points(s)) {
    switch (c) {
      case 0xdf:
        out += "SS";
        break;
      case 0xfb00:
        out += "FF";
        break;
      case 0xfb01:
        out += "FI";
        break;
      case 0xfb02:
        out += "FL";
        break;
      case 0xfb03:
        out += "FFI";
        break;
      case 0xfb04:
        out += "FFL";
        break;
      case 0xfb05:
      case 0xfb06:
        out += "ST";
        break;
      default:
        append_utf8(out, to_upper(c));
    }
  }
  return out;
}
std::string lower(const std::string& s) { return map_chars(s, to_lower); }

std::string capitalize(const std::string& s) {
  std::vector<uint32_t> cps = code_points(s);
  std::string out;
  for (size_t k = 0; k < cps.size(); ++k)
    append_utf8(out, k == 0 ? to_upper(cps[k]) : to_lower(cps[k]));
  return out;
}

// str.title(): a letter after a letter is lowercased, any other letter uppercased.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev = false;
  for (uint32_t c : code_points(s)) {
    const bool cased = is_alpha(c);
    append_utf8(out, cased ? (prev ? to_lower(c) : to_upper(c)) : c);
    prev = cased;
  }
  return out;
}

// jinja2's title filter: words start after runs of whitespace and -({[<.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool start = true;
  for (uint32_t c : code_points(s)) {
    const bool sep = is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      append_utf8(out, c);
      start = true;
    } else {
      append_utf8(out, start ? to_upper(c) : to_lower(c));
      start = false;
    }
  }
  return out;
}

// ---- str methods ------------------------------------------------------------------------

// A copy: callers pass temporaries (a call's argument) and keep the text.
std::string need_str(const Value& v, const char* what) {
  if (!v.is_string()) type_error(fmt::format("{} must be str, not {}", what, type_name(v)));
  return v.s;
}

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<uint32_t> cps = code_points(s);
  std::vector<uint32_t> set;
  const bool ws = chars.is_undefined() || chars.is_none();
  if (!ws) set = code_points(need_str(chars, "strip arg"));
  const auto drop = [&](uint32_t c) {
    return ws ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && drop(cps[b])) ++b;
  if (right)
    while (e > b && drop(cps[e - 1])) --e;
  return encode(cps, b, e);
}

List split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  List out;
  if (sep.is_undefined() || sep.is_none()) {
    std::vector<uint32_t> cps = code_points(s);
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t k = 0; k < cps.size();) {
      while (k < cps.size() && is_py_space(cps[k])) ++k;
      if (k >= cps.size()) break;
      size_t e = k;
      while (e < cps.size() && !is_py_space(cps[e])) ++e;
      words.emplace_back(k, e);
      k = e;
    }
    if (maxsplit >= 0 && int64_t(words.size()) > maxsplit + 1) {
      // The words beyond maxsplit stay joined with the whitespace between them (and after
      // them, for rsplit).
      if (!from_right) {
        const size_t keep = size_t(maxsplit);
        for (size_t k = 0; k < keep; ++k)
          out.push_back(Value::string(encode(cps, words[k].first, words[k].second)));
        size_t end = cps.size();
        while (end > 0 && is_py_space(cps[end - 1])) --end;
        out.push_back(Value::string(encode(cps, words[keep].first, end)));
      } else {
        const size_t first_kept = words.size() - size_t(maxsplit);
        size_t begin = 0;
        while (begin < cps.size() && is_py_space(cps[begin])) ++begin;
        out.push_back(Value::string(encode(cps, begin, words[first_kept - 1].second)));
        for (size_t k = first_kept; k < words.size(); ++k)
          out.push_back(Value::string(encode(cps, words[k].first, words[k].second)));
      }
      return out;
    }
    for (auto [b, e] : words) out.push_back(Value::string(encode(cps, b, e)));
    return out;
  }
  const std::string& d = need_str(sep, "separator");
  if (d.empty()) type_error("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t start = 0;
    for (;;) {
      if (maxsplit >= 0 && int64_t(parts.size()) >= maxsplit) break;
      const size_t at = s.find(d, start);
      if (at == std::string::npos) break;
      parts.push_back(s.substr(start, at - start));
      start = at + d.size();
    }
    parts.push_back(s.substr(start));
  } else {
    size_t end = s.size();
    std::vector<std::string> rev;
    for (;;) {
      if (maxsplit >= 0 && int64_t(rev.size()) >= maxsplit) break;
      if (end < d.size()) break;
      const size_t at = s.rfind(d, end - d.size());
      if (at == std::string::npos) break;
      rev.push_back(s.substr(at + d.size(), end - at - d.size()));
      end = at;
    }
    rev.push_back(s.substr(0, end));
    parts.assign(rev.rbegin(), rev.rend());
  }
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

std::string replace(const std::string& s, const std::string& old, const std::string& repl,
                    int64_t count) {
  std::string out;
  if (old.empty()) {
    std::vector<uint32_t> cps = code_points(s);
    int64_t done = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (k < cps.size()) append_utf8(out, cps[k]);
      check_size(out.size());
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  for (;;) {
    const size_t at = count >= 0 && done >= count ? std::string::npos : s.find(old, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += repl;
    check_size(out.size());
    start = at + old.size();
    ++done;
  }
  out.append(s, start);
  return out;
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start) {
  const auto one = [&](const Value& a) {
    const std::string& x = need_str(a, start ? "startswith arg" : "endswith arg");
    return x.size() <= s.size() && (start ? s.compare(0, x.size(), x) == 0
                                          : s.compare(s.size() - x.size(), x.size(), x) == 0);
  };
  if (affix.is_list() && affix.tuple) {
    for (const Value& a : *affix.list)
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

int64_t to_int_arg(const Value& v, const char* what);

// s[start:end] by code points, as Python slices the string before find, count, startswith and
// endswith look (the arguments at positions `first` and `first + 1`); `offset`: where the
// window starts, in code points (past the end when start is: then nothing is found).
std::string window(const std::string& s, const CallArgs& a, size_t first, int64_t& offset) {
  const Value b = a.get(first, "start", Value::none()), e = a.get(first + 1, "end", Value::none());
  const std::vector<uint32_t> cps = code_points(s);
  const int64_t n = int64_t(cps.size());
  const auto index = [&](const Value& v, int64_t dflt) {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t x = to_int_arg(v, "slice index");
    if (x < 0) x += n;
    return std::clamp<int64_t>(x, 0, n);
  };
  offset = index(b, 0);
  if (!b.is_none() && !b.is_undefined() && to_int_arg(b, "start") > n) {
    offset = n + 1;
    return "";
  }
  const int64_t end = index(e, n);
  return end <= offset ? "" : encode(cps, size_t(offset), size_t(end));
}

int64_t to_int_arg(const Value& v, const char* what) {
  if (v.kind == Value::Kind::Int) return v.i;
  if (v.kind == Value::Kind::Bool) return v.b;
  type_error(fmt::format("{} must be an integer, not {}", what, type_name(v)));
}

// Python's format-spec mini-language, the common part:
// [[fill]align][sign][0][width][,][.prec][type].
std::string apply_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return to_str(v);
  size_t p = 0;
  std::string fill = " ";
  char align = 0, sign = '-';
  std::vector<uint32_t> sc = code_points(spec);
  std::string s;
  if (sc.size() >= 2 && (sc[1] == '<' || sc[1] == '>' || sc[1] == '^' || sc[1] == '=')) {
    fill.clear();
    append_utf8(fill, sc[0]);
    align = char(sc[1]);
    p = 2;
  } else if (!sc.empty() && (sc[0] == '<' || sc[0] == '>' || sc[0] == '^' || sc[0] == '=')) {
    align = char(sc[0]);
    p = 1;
  }
  if (p < sc.size() && (sc[p] == '+' || sc[p] == '-' || sc[p] == ' ')) sign = char(sc[p++]);
  if (p < sc.size() && sc[p] == '0') {
    if (!align) fill = "0", align = '=';
    ++p;
  }
  size_t width = 0;
  while (p < sc.size() && is_digit(sc[p]))
    width = std::min<size_t>(width * 10 + (sc[p++] - '0'), 100000);
  bool comma = false;
  if (p < sc.size() && sc[p] == ',') comma = true, ++p;
  int prec = -1;
  if (p < sc.size() && sc[p] == '.') {
    ++p;
    prec = 0;
    while (p < sc.size() && is_digit(sc[p])) prec = std::min(prec * 10 + int(sc[p++] - '0'), 100);
  }
  const char type = p < sc.size() ? char(sc[p++]) : 0;
  if (p != sc.size()) type_error(fmt::format("Invalid format specifier '{}'", spec));
  std::string body;
  bool numeric = false;
  if (type == 'd' || (type == 0 && (v.kind == Value::Kind::Int))) {
    if (v.kind != Value::Kind::Int && v.kind != Value::Kind::Bool)
      type_error(fmt::format("Unknown format code 'd' for object of type '{}'", type_name(v)));
    const int64_t x = v.kind == Value::Kind::Bool ? v.b : v.i;
    body = std::to_string(x);
    if (comma) {
      std::string digits = std::to_string(x < 0 ? -x : x), grouped;
      for (size_t k = 0; k < digits.size(); ++k) {
        if (k && (digits.size() - k) % 3 == 0) grouped += ',';
        grouped += digits[k];
      }
      body = (x < 0 ? "-" : "") + grouped;
    }
    numeric = true;
  } else if (type == 'f' || type == 'F' || type == 'e' || type == 'g' || type == '%' ||
             (type == 0 && v.kind == Value::Kind::Float && prec >= 0)) {
    if (!v.is_number())
      type_error(fmt::format("Unknown format code '{}' for object of type '{}'", type ? type : 'f',
                             type_name(v)));
    double x = v.as_double();
    const int pr = prec < 0 ? 6 : prec;
    if (type == '%') x *= 100;
    body = type == 'e'   ? fmt::format("{:.{}e}", x, pr)
           : type == 'g' ? fmt::format("{:.{}g}", x, pr == 0 ? 1 : pr)
                         : fmt::format("{:.{}f}", x, pr);
    if (type == '%') body += '%';
    numeric = true;
  } else if (type == 'x' || type == 'X' || type == 'o' || type == 'b') {
    if (v.kind != Value::Kind::Int)
      type_error(
          fmt::format("Unknown format code '{}' for object of type '{}'", type, type_name(v)));
    body = type == 'x'   ? fmt::format("{:x}", v.i)
           : type == 'X' ? fmt::format("{:X}", v.i)
           : type == 'o' ? fmt::format("{:o}", v.i)
                         : fmt::format("{:b}", v.i);
    numeric = true;
  } else if (type == 0 || type == 's') {
    if (type == 's' && !v.is_string())
      type_error(fmt::format("Unknown format code 's' for object of type '{}'", type_name(v)));
    body = v.kind == Value::Kind::Float && type == 0 ? format_float(v.f) : to_str(v);
    if (prec >= 0 && !v.is_number()) body = encode(code_points(body), 0, size_t(prec));
  } else {
    type_error(fmt::format("Unknown format code '{}'", type));
  }
  if (numeric && sign != '-' && !body.empty() && body[0] != '-') body = std::string(1, sign) + body;
  const size_t len = char_count(body);
  if (width <= len) return body;
  const size_t pad = width - len;
  std::string fills;
  for (size_t k = 0; k < pad; ++k) fills += fill;
  if (!align) align = numeric ? '>' : '<';
  if (align == '<') return body + fills;
  if (align == '>') return fills + body;
  if (align == '=') {
    const bool has_sign = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ');
    return has_sign ? body.substr(0, 1) + fills + body.substr(1) : fills + body;
  }
  std::string left, right;
  for (size_t k = 0; k < pad / 2; ++k) left += fill;
  for (size_t k = 0; k < pad - pad / 2; ++k) right += fill;
  return left + body + right;
}

// str.format with positional and keyword fields; field names may index (`{0[1]}`) or take
// items (`{0.name}`) of data values.
std::string str_format(const std::string& fmtstr, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t k = 0; k < fmtstr.size(); ++k) {
    const char c = fmtstr[k];
    if (c == '{' && k + 1 < fmtstr.size() && fmtstr[k + 1] == '{') {
      out += '{', ++k;
      continue;
    }
    if (c == '}' && k + 1 < fmtstr.size() && fmtstr[k + 1] == '}') {
      out += '}', ++k;
      continue;
    }
    if (c == '}') type_error("Single '}' encountered in format string");
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t end = fmtstr.find('}', k);
    if (end == std::string::npos) type_error("Single '{' encountered in format string");
    std::string field = fmtstr.substr(k + 1, end - k - 1);
    k = end;
    std::string spec;
    if (const size_t colon = field.find(':'); colon != std::string::npos)
      spec = field.substr(colon + 1), field.resize(colon);
    char conv = 0;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      conv = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    size_t name_end = 0;
    while (name_end < field.size() && field[name_end] != '.' && field[name_end] != '[') ++name_end;
    const std::string head = field.substr(0, name_end);
    Value v;
    if (head.empty()) {
      if (auto_index >= args.pos.size())
        type_error("Replacement index out of range for positional args tuple");
      v = args.pos[auto_index++];
    } else if (std::all_of(head.begin(), head.end(),
                           [](char ch) { return ch >= '0' && ch <= '9'; })) {
      const size_t idx = size_t(std::strtoull(head.c_str(), nullptr, 10));
      if (idx >= args.pos.size())
        type_error("Replacement index out of range for positional args tuple");
      v = args.pos[idx];
    } else {
      bool found = false;
      for (const auto& [key, x] : args.kw)
        if (key == head) v = x, found = true;
      if (!found) type_error(fmt::format("KeyError: '{}'", head));
    }
    for (size_t p = name_end; p < field.size();) {
      if (field[p] == '.') {
        size_t q = p + 1;
        while (q < field.size() && field[q] != '.' && field[q] != '[') ++q;
        const std::string attr = field.substr(p + 1, q - p - 1);
        if (attr.empty() || attr[0] == '_') type_error("access to that attribute is unsafe");
        v = get_attr(v, attr);
        p = q;
      } else {
        const size_t q = field.find(']', p);
        if (q == std::string::npos) type_error("Missing ']' in format string");
        const std::string key = field.substr(p + 1, q - p - 1);
        const bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) {
          return ch >= '0' && ch <= '9';
        });
        v = get_item(v, digits ? Value::integer(std::strtoll(key.c_str(), nullptr, 10))
                               : Value::string(key));
        p = q + 1;
      }
      if (v.is_undefined()) fail_undefined(v);
    }
    if (conv == 'r') v = Value::string(repr(v));
    if (conv == 's') v = Value::string(to_str(v));
    out += apply_spec(v, spec);
    check_size(out.size());
  }
  return out;
}

// printf-style `fmt % args`.
std::string percent_format(const std::string& f, const Value& rhs) {
  std::vector<Value> args;
  const bool mapping = rhs.is_dict();
  if (rhs.is_list() && rhs.tuple)
    args = *rhs.list;
  else
    args.push_back(rhs);
  size_t next_arg = 0;
  std::string out;
  for (size_t k = 0; k < f.size(); ++k) {
    if (f[k] != '%') {
      out += f[k];
      continue;
    }
    if (++k >= f.size()) type_error("incomplete format");
    Value v;
    bool have = false;
    if (f[k] == '(') {
      const size_t close = f.find(')', k);
      if (close == std::string::npos || !mapping) type_error("format requires a mapping");
      const Value* x = rhs.dict->find(Value::string(f.substr(k + 1, close - k - 1)));
      if (!x) type_error(fmt::format("KeyError: '{}'", f.substr(k + 1, close - k - 1)));
      v = *x, have = true;
      k = close + 1;
    }
    std::string flags;
    while (k < f.size() &&
           (f[k] == '-' || f[k] == '+' || f[k] == ' ' || f[k] == '0' || f[k] == '#'))
      flags += f[k++];
    std::string width;
    while (k < f.size() && is_digit(uint8_t(f[k]))) width += f[k++];
    int prec = -1;
    if (k < f.size() && f[k] == '.') {
      ++k;
      prec = 0;
      while (k < f.size() && is_digit(uint8_t(f[k])))
        prec = std::min(prec * 10 + (f[k++] - '0'), 100);
    }
    if (k >= f.size()) type_error("incomplete format");
    const char conv = f[k];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!have) {
      if (mapping && args.size() == 1) {
        v = rhs;
      } else {
        if (next_arg >= args.size()) type_error("not enough arguments for format string");
        v = args[next_arg++];
      }
    }
    std::string spec;
    const bool left = flags.find('-') != std::string::npos;
    if (!width.empty()) spec += left ? "<" : ">";
    if (flags.find('+') != std::string::npos) spec += '+';
    if (flags.find('0') != std::string::npos && !left && !width.empty()) spec = "0";
    spec += width;
    Value x = v;
    switch (conv) {
      case 's':
        x = Value::string(to_str(v));
        if (prec >= 0) spec += "." + std::to_string(prec);
        break;
      case 'r':
        x = Value::string(repr(v));
        break;
      case 'c':
        if (v.kind == Value::Kind::Int) {
          if (v.i < 0 || v.i > 0x10ffff) type_error("%c arg not in range(0x110000)");
          std::string c;
          append_utf8(c, uint32_t(v.i));
          x = Value::string(c);
        } else if (!v.is_string() || char_count(v.s) != 1) {
          type_error("%c requires an int or a unicode character");
        }
        break;
      case 'd':
      case 'i':
        if (v.kind == Value::Kind::Float) x = Value::integer(int64_t(v.f));
        if (!x.is_number())
          type_error(
              fmt::format("%{} format: a real number is required, not {}", conv, type_name(v)));
        spec += 'd';
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'g':
        if (!v.is_number()) type_error("must be real number, not " + type_name(v));
        spec += "." + std::to_string(prec < 0 ? 6 : prec) + (conv == 'F' ? 'f' : conv);
        break;
      case 'x':
      case 'X':
      case 'o':
        if (v.kind != Value::Kind::Int)
          type_error(fmt::format("%{} format: an integer is required", conv));
        spec += conv;
        break;
      default:
        type_error(fmt::format("unsupported format character '{}'", conv));
    }
    out += apply_spec(x, spec);
    check_size(out.size());
  }
  if (!mapping && next_arg < args.size())
    type_error("not all arguments converted during string formatting");
  return out;
}

// ---- attribute lookups for filters (`attribute="a.0.b"`) ---------------------------------

Value attribute_of(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char ch) {
      return ch >= '0' && ch <= '9';
    });
    v = get_item(
        v, digits ? Value::integer(std::strtoll(part.c_str(), nullptr, 10)) : Value::string(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Sort/compare keys: strings lowercased unless case-sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return v.is_string() && !case_sensitive ? Value::string(lower(v.s)) : v;
}

std::string join(const Value& seq, const std::string& sep, const Value& attribute) {
  std::string out;
  bool first = true;
  for (const Value& x : iterate(seq)) {
    if (!first) out += sep;
    first = false;
    out += to_str(
        attribute.is_undefined() || attribute.is_none() ? x : attribute_of(x, to_str(attribute)));
    check_size(out.size());
  }
  return out;
}

// str.splitlines(): every line boundary Python knows, the boundaries dropped (or kept).
std::vector<std::string> splitlines(const std::string& s, bool keep = false) {
  std::vector<std::string> out;
  std::vector<uint32_t> cps = code_points(s);
  size_t start = 0;
  for (size_t k = 0; k < cps.size(); ++k) {
    const uint32_t c = cps[k];
    const bool boundary = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c ||
                          c == 0x1d || c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) continue;
    const size_t end = k;
    if (c == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') ++k;
    out.push_back(encode(cps, start, keep ? k + 1 : end));
    start = k + 1;
  }
  if (start < cps.size()) out.push_back(encode(cps, start));
  return out;
}

// jinja2's indent filter, step by step (a newline is added first so that a trailing newline
// gives a last, empty line).
std::string indent(const Value& v, const Value& width, bool first, bool blank) {
  if (!v.is_string()) {
    if (v.is_undefined()) fail_undefined(v);
    type_error(fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v)));
  }
  const std::string pad =
      width.is_string()
          ? width.s
          : std::string(size_t(std::clamp<int64_t>(to_int_arg(width, "width"), 0, 4096)), ' ');
  const std::vector<std::string> lines = splitlines(v.s + "\n");
  std::string out;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) out += (k ? "\n" + pad : "") + lines[k];
  } else if (!lines.empty()) {
    out = lines[0];
    for (size_t k = 1; k < lines.size(); ++k)
      out += "\n" + (lines[k].empty() ? "" : pad) + lines[k];
  }
  if (first) out = pad + out;
  check_size(out.size());
  return out;
}

Value to_int(const Value& v, const Value& fallback, int base) {
  switch (v.kind) {
    case Value::Kind::Int:
      return v;
    case Value::Kind::Bool:
      return Value::integer(v.b);
    case Value::Kind::Float:
      if (std::isfinite(v.f) && std::fabs(v.f) < 9.2e18) return Value::integer(int64_t(v.f));
      return fallback;
    case Value::Kind::String: {
      std::string t = strip(v.s, Value::undefined(), true, true);
      std::string digits;
      for (char c : t)
        if (c != '_') digits += c;
      // Python's int(text, base) takes the prefix of its base (and base 0 reads any).
      {
        std::string body = digits;
        const bool signed_ = !body.empty() && (body[0] == '-' || body[0] == '+');
        const std::string sign = signed_ ? body.substr(0, 1) : "";
        if (signed_) body.erase(0, 1);
        if (body.size() > 2 && body[0] == '0') {
          const char p = char(std::tolower(uint8_t(body[1])));
          const int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
          if (pb && (base == 0 || base == pb)) {
            digits = sign + body.substr(2);
            base = pb;
          }
        }
        if (base == 0) base = 10;
      }
      char* end = nullptr;
      errno = 0;
      const long long x = std::strtoll(digits.c_str(), &end, base);
      if (!digits.empty() && end && *end == '\0' && errno == 0) return Value::integer(x);
      const double d = std::strtod(t.c_str(), &end);
      if (!t.empty() && end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value::integer(int64_t(d));
      return fallback;
    }
    case Value::Kind::Undefined:
      fail_undefined(v);
    default:
      return fallback;
  }
}

Value to_float(const Value& v, const Value& fallback) {
  switch (v.kind) {
    case Value::Kind::Int:
    case Value::Kind::Bool:
    case Value::Kind::Float:
      return Value::number(v.as_double());
    case Value::Kind::String: {
      const std::string t = strip(v.s, Value::undefined(), true, true);
      std::string lowered = lower(t);
      if (lowered == "nan" || lowered == "+nan" || lowered == "-nan") return Value::number(NAN);
      if (lowered == "inf" || lowered == "+inf" || lowered == "infinity")
        return Value::number(INFINITY);
      if (lowered == "-inf" || lowered == "-infinity") return Value::number(-INFINITY);
      // Underscores may group digits (Python: only between two digits).
      std::string u;
      for (size_t k = 0; k < t.size(); ++k) {
        if (t[k] == '_') {
          if (k == 0 || k + 1 >= t.size() || !is_digit(uint8_t(t[k - 1])) ||
              !is_digit(uint8_t(t[k + 1])))
            return fallback;
          continue;
        }
        u += t[k];
      }
      char* end = nullptr;
      const double d = std::strtod(u.c_str(), &end);
      if (!u.empty() && end && *end == '\0' && u.find_first_of("xXpP") == std::string::npos)
        return Value::number(d);
      return fallback;
    }
    case Value::Kind::Undefined:
      fail_undefined(v);
    default:
      return fallback;
  }
}

Value round_value(const Value& v, int64_t precision, const std::string& method) {
  if (!v.is_number()) {
    if (v.is_undefined()) fail_undefined(v);
    type_error(fmt::format("type {} doesn't define __round__ method", type_name(v)));
  }
  if (method != "common" && method != "ceil" && method != "floor")
    type_error("method must be common, ceil or floor");
  precision = std::clamp<int64_t>(precision, -300, 300);
  if (v.kind != Value::Kind::Float && method == "common") {
    // round(int, n) stays an int: unchanged for n >= 0, to a multiple of 10^-n (ties to even)
    // below.
    const int64_t x = v.kind == Value::Kind::Bool ? v.b : v.i;
    if (precision >= 0) return Value::integer(x);
    if (precision < -18) return Value::integer(0);
    int64_t m = 1;
    for (int64_t k = 0; k < -precision; ++k) m *= 10;
    int64_t q = x / m, r = x % m;
    if (r < 0) r += m, --q;
    if (2 * r > m || (2 * r == m && (q & 1))) ++q;
    int64_t out;
    if (__builtin_mul_overflow(q, m, &out)) type_error("integer overflow");
    return Value::integer(out);
  }
  const double x = v.as_double();
  if (!std::isfinite(x)) return Value::number(x);
  if (method == "common") {
    if (precision >= 0) {
      // Python's round(): exact decimal rounding, ties to even.
      const std::string s = fmt::format("{:.{}f}", x, int(precision));
      return Value::number(std::strtod(s.c_str(), nullptr));
    }
    const double m = std::pow(10.0, double(-precision));
    return Value::number(std::nearbyint(x / m) * m);
  }
  const double m = std::pow(10.0, double(precision));
  return Value::number(method == "ceil" ? std::ceil(x * m) / m : std::floor(x * m) / m);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value markup(std::string s) {
  Value v = make_string(std::move(s));
  v.markup = true;
  return v;
}

// What Markup does to a value joined to it: escaped unless it is Markup already.
std::string escaped(const Value& v) { return v.markup ? v.s : html_escape(to_str(v)); }

// A filter's string result keeps the Markup of its input (Markup's methods return Markup).
Value like(const Value& input, std::string s) {
  Value v = make_string(std::move(s));
  v.markup = input.markup && input.is_string();
  return v;
}

List sorted(List items, bool reverse, bool case_sensitive, const Value& attribute) {
  const bool by_attr = !(attribute.is_undefined() || attribute.is_none());
  std::vector<std::string> attrs;
  if (by_attr) {
    const std::string all = to_str(attribute);
    for (size_t start = 0;;) {
      const size_t comma = all.find(',', start);
      attrs.push_back(all.substr(start, comma == std::string::npos ? comma : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t k = 0; k < items.size(); ++k) {
    Value key;
    if (attrs.size() > 1) {
      List parts;
      for (const auto& at : attrs)
        parts.push_back(sort_key(attribute_of(items[k], at), case_sensitive));
      key = Value::make_list(std::move(parts), true);
    } else {
      key = sort_key(by_attr ? attribute_of(items[k], attrs[0]) : items[k], case_sensitive);
    }
    keyed.emplace_back(std::move(key), k);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? compare(b.first, a.first) < 0 : compare(a.first, b.first) < 0;
  });
  List out;
  for (const auto& kv : keyed) out.push_back(items[kv.second]);
  return out;
}

Value generator(List items) {
  Value v = Value::make_list(std::move(items));
  v.generator = true;
  return v;
}

// The test a select/reject/selectattr/rejectattr call names, applied to one value.
bool select_test(const Value& v, const CallArgs& args, size_t first) {
  if (args.pos.size() <= first) return truthy(v);
  CallArgs rest;
  rest.pos.assign(args.pos.begin() + long(first) + 1, args.pos.end());
  rest.kw = args.kw;
  return apply_test(to_str(args.pos[first]), v, rest);
}

bool is_method(const Value& obj, const std::string& name);

using FilterFn = Value (*)(const Value&, const CallArgs&);

std::string str_of(const Value& v) { return to_str(v); }

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const std::map<std::string, FilterFn, std::less<>> table = {
      {"abs",
       [](const Value& v, const CallArgs&) {
         if (v.kind == Value::Kind::Int) {
           if (v.i == INT64_MIN) type_error("integer overflow");
           return Value::integer(v.i < 0 ? -v.i : v.i);
         }
         if (v.kind == Value::Kind::Bool) return Value::integer(v.b);
         if (v.kind == Value::Kind::Float) return Value::number(std::fabs(v.f));
         if (v.is_undefined()) fail_undefined(v);
         type_error(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
       }},
      {"attr",
       [](const Value& v, const CallArgs& a) {
         const std::string name = to_str(a.get(0, "name"));
         if (v.is_dict() && !v.namespace_ && !is_method(v, name))
           return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
         return get_attr(v, name);
       }},
      {"batch",
       [](const Value& v, const CallArgs& a) {
         const int64_t n = to_int_arg(a.get(0, "linecount"), "linecount");
         if (n <= 0) type_error("batch size must be positive");
         const Value fill = a.get(1, "fill_with", Value::none());
         List out, cur;
         for (const Value& x : iterate(v)) {
           cur.push_back(x);
           if (int64_t(cur.size()) == n)
             out.push_back(Value::make_list(std::move(cur))), cur.clear();
         }
         if (!cur.empty()) {
           if (!fill.is_none())
             while (int64_t(cur.size()) < n) cur.push_back(fill);
           out.push_back(Value::make_list(std::move(cur)));
         }
         return generator(std::move(out));
       }},
      {"capitalize",
       [](const Value& v, const CallArgs&) { return like(v, capitalize(str_of(v))); }},
      {"center",
       [](const Value& v, const CallArgs& a) {
         if (a.pos.size() + a.kw.size() > 1) type_error("center() takes the width only");
         CallArgs w;
         w.pos.push_back(a.get(0, "width", Value::integer(80)));
         return call_method(Value::string(str_of(v)), "center", w);
       }},
      {"count", [](const Value& v, const CallArgs& a) { return apply_filter("length", v, a); }},
      {"d", [](const Value& v, const CallArgs& a) { return apply_filter("default", v, a); }},
      {"default",
       [](const Value& v, const CallArgs& a) {
         const bool boolean = truthy(a.get(1, "boolean", Value::boolean(false)));
         if (v.is_undefined() || (boolean && !truthy(v)))
           return a.get(0, "default_value", Value::string(""));
         return v;
       }},
      {"dictsort",
       [](const Value& v, const CallArgs& a) {
         if (!v.is_dict()) {
           if (v.is_undefined()) fail_undefined(v);
           type_error(fmt::format("'{}' object has no attribute 'items'", type_name(v)));
         }
         const bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
         const std::string by = to_str(a.get(1, "by", Value::string("key")));
         const bool reverse = truthy(a.get(2, "reverse", Value::boolean(false)));
         if (by != "key" && by != "value")
           type_error("You can only sort by either 'key' or 'value'");
         List items;
         for (const auto& [k, x] : v.dict->items) items.push_back(Value::make_list({k, x}, true));
         std::vector<std::pair<Value, size_t>> keyed;
         for (size_t k = 0; k < items.size(); ++k)
           keyed.emplace_back(sort_key((*items[k].list)[by == "key" ? 0 : 1], cs), k);
         std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
           return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
         });
         List out;
         for (const auto& kv : keyed) out.push_back(items[kv.second]);
         return Value::make_list(std::move(out));
       }},
      {"e", [](const Value& v, const CallArgs&) { return markup(escaped(v)); }},
      {"escape", [](const Value& v, const CallArgs&) { return markup(escaped(v)); }},
      {"first",
       [](const Value& v, const CallArgs&) {
         if (v.is_string()) {
           std::vector<uint32_t> cps = code_points(v.s);
           return cps.empty() ? Value::undefined("No first item, sequence was empty.")
                              : Value::string(encode(cps, 0, 1));
         }
         List items = iterate(v);
         return items.empty() ? Value::undefined("No first item, sequence was empty.") : items[0];
       }},
      {"float",
       [](const Value& v, const CallArgs& a) {
         return to_float(v, a.get(0, "default", Value::number(0)));
       }},
      {"forceescape", [](const Value& v, const CallArgs&) { return markup(escaped(v)); }},
      {"format",
       [](const Value& v, const CallArgs& a) {
         if (!a.kw.empty() && !a.pos.empty())
           type_error("can't handle positional and keyword arguments at the same time");
         if (!a.kw.empty()) {
           Value d = Value::make_dict();
           for (const auto& [k, x] : a.kw) d.dict->set(Value::string(k), x);
           return make_string(percent_format(str_of(v), d));
         }
         return make_string(percent_format(str_of(v), Value::make_list(a.pos, true)));
       }},
      {"groupby",
       [](const Value& v, const CallArgs& a) {
         const std::string attr = to_str(a.get(0, "attribute"));
         const Value dflt = a.get(1, "default");
         const bool cs = truthy(a.get(2, "case_sensitive", Value::boolean(false)));
         List items = iterate(v);
         std::vector<std::pair<Value, size_t>> keyed;
         for (size_t k = 0; k < items.size(); ++k) {
           Value key = attribute_of(items[k], attr);
           if (key.is_undefined() && !dflt.is_undefined()) key = dflt;
           keyed.emplace_back(sort_key(key, cs), k);
         }
         std::stable_sort(keyed.begin(), keyed.end(), [](const auto& x, const auto& y) {
           return compare(x.first, y.first) < 0;
         });
         List out;
         for (size_t k = 0; k < keyed.size();) {
           List group;
           size_t e = k;
           while (e < keyed.size() && equals(keyed[e].first, keyed[k].first))
             group.push_back(items[keyed[e++].second]);
           Value key = attribute_of(group[0], attr);
           if (key.is_undefined() && !dflt.is_undefined()) key = dflt;
           if (!cs && key.is_string()) key = keyed[k].first;
           out.push_back(Value::make_list({key, Value::make_list(std::move(group))}, true));
           k = e;
         }
         return Value::make_list(std::move(out));
       }},
      {"indent",
       [](const Value& v, const CallArgs& a) {
         return make_string(indent(v, a.get(0, "width", Value::integer(4)),
                                   truthy(a.get(1, "first", Value::boolean(false))),
                                   truthy(a.get(2, "blank", Value::boolean(false)))));
       }},
      {"int",
       [](const Value& v, const CallArgs& a) {
         const int64_t base = to_int_arg(a.get(1, "base", Value::integer(10)), "base");
         if (base != 0 && (base < 2 || base > 36))
           type_error("int() base must be >= 2 and <= 36, or 0");
         return to_int(v, a.get(0, "default", Value::integer(0)), int(base));
       }},
      {"items",
       [](const Value& v, const CallArgs&) {
         if (v.is_undefined()) return generator({});
         if (!v.is_dict() || v.namespace_) type_error("Can only get item pairs from a mapping.");
         List out;
         for (const auto& [k, x] : v.dict->items) out.push_back(Value::make_list({k, x}, true));
         return generator(std::move(out));
       }},
      {"join",
       [](const Value& v, const CallArgs& a) {
         return make_string(
             join(v, to_str(a.get(0, "d", Value::string(""))), a.get(1, "attribute")));
       }},
      {"last",
       [](const Value& v, const CallArgs&) {
         if (v.is_list() && v.generator) type_error("'generator' object is not reversible");
         if (v.is_string()) {
           std::vector<uint32_t> cps = code_points(v.s);
           return cps.empty() ? Value::undefined("No last item, sequence was empty.")
                              : Value::string(encode(cps, cps.size() - 1));
         }
         List items = iterate(v);
         return items.empty() ? Value::undefined("No last item, sequence was empty.")
                              : items.back();
       }},
      {"length",
       [](const Value& v, const CallArgs&) {
         switch (v.kind) {
           case Value::Kind::String:
             return Value::integer(int64_t(char_count(v.s)));
           case Value::Kind::List:
             if (v.generator) type_error("object of type 'generator' has no len()");
             return Value::integer(int64_t(v.list->size()));
           case Value::Kind::Dict:
             return Value::integer(int64_t(v.dict->items.size()));
           case Value::Kind::Undefined:
             return Value::integer(0);
           default:
             type_error(fmt::format("object of type '{}' has no len()", type_name(v)));
         }
       }},
      {"list",
       [](const Value& v, const CallArgs&) {
         if (v.is_string()) {
           List out;
           for (uint32_t c : code_points(v.s)) {
             std::string s;
             append_utf8(s, c);
             out.push_back(Value::string(std::move(s)));
           }
           return Value::make_list(std::move(out));
         }
         return Value::make_list(iterate(v));
       }},
      {"lower", [](const Value& v, const CallArgs&) { return like(v, lower(str_of(v))); }},
      {"map",
       [](const Value& v, const CallArgs& a) {
         List out;
         if (!truthy(v)) return generator({});
         if (a.pos.empty()) {
           const Value attr = a.get(99, "attribute");
           if (attr.is_undefined()) return generator(iterate(v));
           const Value dflt = a.get(99, "default");
           for (const Value& x : iterate(v)) {
             Value y = attribute_of(x, to_str(attr));
             out.push_back(y.is_undefined() && !dflt.is_undefined() ? dflt : y);
           }
           return generator(std::move(out));
         }
         const std::string name = to_str(a.pos[0]);
         if (!has_filter(name)) type_error(fmt::format("No filter named '{}'.", name));
         CallArgs rest;
         rest.pos.assign(a.pos.begin() + 1, a.pos.end());
         rest.kw = a.kw;
         for (const Value& x : iterate(v)) out.push_back(apply_filter(name, x, rest));
         return generator(std::move(out));
       }},
      {"max",
       [](const Value& v, const CallArgs& a) {
         List items = iterate(v);
         if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
         List s = sorted(items, true, truthy(a.get(0, "case_sensitive", Value::boolean(false))),
                         a.get(1, "attribute"));
         return s.front();
       }},
      {"min",
       [](const Value& v, const CallArgs& a) {
         List items = iterate(v);
         if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
         List s = sorted(items, false, truthy(a.get(0, "case_sensitive", Value::boolean(false))),
                         a.get(1, "attribute"));
         return s.front();
       }},
      {"pprint", [](const Value& v, const CallArgs&) { return Value::string(repr(v)); }},
      {"reject",
       [](const Value& v, const CallArgs& a) {
         List out;
         if (!truthy(v)) return generator({});
         for (const Value& x : iterate(v))
           if (!select_test(x, a, 0)) out.push_back(x);
         return generator(std::move(out));
       }},
      {"rejectattr",
       [](const Value& v, const CallArgs& a) {
         List out;
         if (!truthy(v)) return generator({});
         const std::string attr = to_str(a.get(0, "attribute"));
         for (const Value& x : iterate(v))
           if (!select_test(attribute_of(x, attr), a, 1)) out.push_back(x);
         return generator(std::move(out));
       }},
      {"replace",
       [](const Value& v, const CallArgs& a) {
         const Value count = a.get(2, "count", Value::none());
         return make_string(replace(str_of(v), to_str(a.get(0, "old")), to_str(a.get(1, "new")),
                                    count.is_none() ? -1 : to_int_arg(count, "count")));
       }},
      {"reverse",
       [](const Value& v, const CallArgs&) {
         if (v.is_string()) {
           std::vector<uint32_t> cps = code_points(v.s);
           std::reverse(cps.begin(), cps.end());
           return Value::string(encode(cps));
         }
         List items = iterate(v);
         std::reverse(items.begin(), items.end());
         return generator(std::move(items));
       }},
      {"round",
       [](const Value& v, const CallArgs& a) {
         return round_value(v, to_int_arg(a.get(0, "precision", Value::integer(0)), "precision"),
                            to_str(a.get(1, "method", Value::string("common"))));
       }},
      {"safe", [](const Value& v, const CallArgs&) { return markup(str_of(v)); }},
      {"select",
       [](const Value& v, const CallArgs& a) {
         List out;
         if (!truthy(v)) return generator({});
         for (const Value& x : iterate(v))
           if (select_test(x, a, 0)) out.push_back(x);
         return generator(std::move(out));
       }},
      {"selectattr",
       [](const Value& v, const CallArgs& a) {
         List out;
         if (!truthy(v)) return generator({});
         const std::string attr = to_str(a.get(0, "attribute"));
         for (const Value& x : iterate(v))
           if (select_test(attribute_of(x, attr), a, 1)) out.push_back(x);
         return generator(std::move(out));
       }},
      {"slice",
       [](const Value& v, const CallArgs& a) {
         const int64_t n = to_int_arg(a.get(0, "slices"), "slices");
         if (n <= 0 || n > 100000) type_error("slices must be between 1 and 100000");
         const Value fill = a.get(1, "fill_with", Value::none());
         List seq = iterate(v), out;
         const int64_t len = int64_t(seq.size()), per = len / n, extra = len % n;
         int64_t offset = 0;
         for (int64_t k = 0; k < n; ++k) {
           const int64_t start = offset + k * per;
           if (k < extra) ++offset;
           const int64_t end = offset + (k + 1) * per;
           List part(seq.begin() + start, seq.begin() + end);
           if (!fill.is_none() && k >= extra) part.push_back(fill);
           out.push_back(Value::make_list(std::move(part)));
         }
         return generator(std::move(out));
       }},
      {"sort",
       [](const Value& v, const CallArgs& a) {
         return Value::make_list(sorted(
             iterate(v), truthy(a.get(0, "reverse", Value::boolean(false))),
             truthy(a.get(1, "case_sensitive", Value::boolean(false))), a.get(2, "attribute")));
       }},
      {"string", [](const Value& v, const CallArgs&) { return like(v, str_of(v)); }},
      {"sum",
       [](const Value& v, const CallArgs& a) {
         Value total = a.get(1, "start", Value::integer(0));
         const Value attr = a.get(0, "attribute");
         for (const Value& x : iterate(v))
           total =
               binary_op("+", total,
                         attr.is_undefined() || attr.is_none() ? x : attribute_of(x, to_str(attr)));
         return total;
       }},
      {"title", [](const Value& v, const CallArgs&) { return like(v, jinja_title(str_of(v))); }},
      {"tojson",
       [](const Value& v, const CallArgs& a) {
         JsonStyle st;
         st.ensure_ascii = truthy(a.get(0, "ensure_ascii", Value::boolean(false)));
         const Value ind = a.get(1, "indent", Value::none());
         if (!ind.is_none()) {
           st.has_indent = true;
           st.indent =
               ind.is_string()
                   ? ind.s
                   : std::string(size_t(std::clamp<int64_t>(to_int_arg(ind, "indent"), 0, 64)),
                                 ' ');
           st.item_sep = ",";
         }
         const Value sep = a.get(2, "separators", Value::none());
         if (!sep.is_none()) {
           if (!sep.is_list() || sep.list->size() != 2)
             type_error("separators must be a pair of strings");
           st.item_sep = need_str((*sep.list)[0], "separator");
           st.key_sep = need_str((*sep.list)[1], "separator");
         }
         st.sort_keys = truthy(a.get(3, "sort_keys", Value::boolean(false)));
         return make_string(to_json(v, st));
       }},
      {"trim",
       [](const Value& v, const CallArgs& a) {
         return like(v, strip(str_of(v), a.get(0, "chars", Value::none()), true, true));
       }},
      {"unique",
       [](const Value& v, const CallArgs& a) {
         const bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
         const Value attr = a.get(1, "attribute");
         List out, seen;
         for (const Value& x : iterate(v)) {
           Value key = sort_key(
               attr.is_undefined() || attr.is_none() ? x : attribute_of(x, to_str(attr)), cs);
           if (std::any_of(seen.begin(), seen.end(),
                           [&](const Value& s) { return equals(s, key); }))
             continue;
           seen.push_back(key);
           out.push_back(x);
         }
         return generator(std::move(out));
       }},
      {"upper", [](const Value& v, const CallArgs&) { return like(v, upper(str_of(v))); }},
      {"wordcount",
       [](const Value& v, const CallArgs&) {
         int64_t n = 0;
         bool in_word = false;
         for (uint32_t c : code_points(str_of(v))) {
           const bool w = is_alpha(c) || is_digit(c) || c == '_';
           if (w && !in_word) ++n;
           in_word = w;
         }
         return Value::integer(n);
       }},
  };
  return table;
}

using TestFn = bool (*)(const Value&, const CallArgs&);

bool is_integer(const Value& v) { return v.kind == Value::Kind::Int; }

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const std::map<std::string, TestFn, std::less<>> table = {
      {"boolean", [](const Value& v, const CallArgs&) { return v.kind == Value::Kind::Bool; }},
      {"callable", [](const Value& v, const CallArgs&) { return v.kind == Value::Kind::Function; }},
      {"defined", [](const Value& v, const CallArgs&) { return !v.is_undefined(); }},
      {"divisibleby",
       [](const Value& v, const CallArgs& a) {
         const Value d = a.get(0, "num");
         if (v.kind == Value::Kind::Int && d.kind == Value::Kind::Int) {
           if (d.i == 0) type_error("integer division or modulo by zero");
           return d.i == -1 || v.i % d.i == 0;
         }
         return truthy(binary_op("==", binary_op("%", v, d), Value::integer(0)));
       }},
      {"eq", [](const Value& v, const CallArgs& a) { return equals(v, a.get(0, "other")); }},
      {"equalto", [](const Value& v, const CallArgs& a) { return equals(v, a.get(0, "other")); }},
      {"==", [](const Value& v, const CallArgs& a) { return equals(v, a.get(0, "other")); }},
      {"escaped", [](const Value& v, const CallArgs&) { return v.is_string() && v.markup; }},
      {"even",
       [](const Value& v, const CallArgs&) {
         return truthy(binary_op("==", binary_op("%", v, Value::integer(2)), Value::integer(0)));
       }},
      {"false",
       [](const Value& v, const CallArgs&) { return v.kind == Value::Kind::Bool && !v.b; }},
      {"filter", [](const Value& v, const CallArgs&) { return v.is_string() && has_filter(v.s); }},
      {"float", [](const Value& v, const CallArgs&) { return v.kind == Value::Kind::Float; }},
      {"ge",
       [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other"), ">=") >= 0; }},
      {">=",
       [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other"), ">=") >= 0; }},
      {"gt",
       [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other"), ">") > 0; }},
      {">",
       [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other"), ">") > 0; }},
      {"greaterthan",
       [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other"), ">") > 0; }},
      {"in", [](const Value& v, const CallArgs& a) { return contains(a.get(0, "seq"), v); }},
      {"integer", [](const Value& v, const CallArgs&) { return is_integer(v); }},
      {"iterable",
       [](const Value& v, const CallArgs&) {
         return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.namespace_);
       }},
      {"le",
       [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other"), "<=") <= 0; }},
      {"<=",
       [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other"), "<=") <= 0; }},
      {"lower",
       [](const Value& v, const CallArgs&) {
         const std::string s = to_str(v);
         return lower(s) == s && upper(s) != s;
       }},
      {"lt", [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other")) < 0; }},
      {"<", [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other")) < 0; }},
      {"lessthan",
       [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other")) < 0; }},
      {"mapping", [](const Value& v, const CallArgs&) { return v.is_dict() && !v.namespace_; }},
      {"ne", [](const Value& v, const CallArgs& a) { return !equals(v, a.get(0, "other")); }},
      {"!=", [](const Value& v, const CallArgs& a) { return !equals(v, a.get(0, "other")); }},
      {"none", [](const Value& v, const CallArgs&) { return v.is_none(); }},
      {"number",
       [](const Value& v, const CallArgs&) {
         return v.kind == Value::Kind::Int || v.kind == Value::Kind::Float ||
                v.kind == Value::Kind::Bool;
       }},
      {"odd",
       [](const Value& v, const CallArgs&) {
         return truthy(binary_op("==", binary_op("%", v, Value::integer(2)), Value::integer(1)));
       }},
      {"sameas",
       [](const Value& v, const CallArgs& a) {
         const Value o = a.get(0, "other");
         if (v.kind != o.kind) return false;
         switch (v.kind) {
           case Value::Kind::None:
           case Value::Kind::Undefined:
             return true;
           case Value::Kind::Bool:
             return v.b == o.b;
           case Value::Kind::Int:
             return v.i == o.i && v.i >= -5 && v.i <= 256;  // CPython's small-int cache
           case Value::Kind::List:
             return v.list == o.list;
           case Value::Kind::Dict:
             return v.dict == o.dict;
           case Value::Kind::Function:
             return v.fn == o.fn;
           default:
             return false;
         }
       }},
      {"sequence",
       [](const Value& v, const CallArgs&) {
         return v.is_undefined() || v.is_string() || (v.is_list() && !v.generator) ||
                (v.is_dict() && !v.namespace_);
       }},
      {"string", [](const Value& v, const CallArgs&) { return v.is_string(); }},
      {"test", [](const Value& v, const CallArgs&) { return v.is_string() && has_test(v.s); }},
      {"true", [](const Value& v, const CallArgs&) { return v.kind == Value::Kind::Bool && v.b; }},
      {"undefined", [](const Value& v, const CallArgs&) { return v.is_undefined(); }},
      {"upper",
       [](const Value& v, const CallArgs&) {
         const std::string s = to_str(v);
         return upper(s) == s && lower(s) != s;
       }},
  };
  return table;
}

// ---- methods ------------------------------------------------------------------------------

const std::set<std::string, std::less<>> kStrMethods = {
    "capitalize", "center",     "count",      "endswith",     "find",         "format",
    "index",      "isalnum",    "isalpha",    "isdecimal",    "isdigit",      "islower",
    "isnumeric",  "isspace",    "istitle",    "isupper",      "join",         "ljust",
    "lower",      "lstrip",     "partition",  "removeprefix", "removesuffix", "replace",
    "rfind",      "rindex",     "rjust",      "rpartition",   "rsplit",       "rstrip",
    "split",      "splitlines", "startswith", "strip",        "swapcase",     "title",
    "upper",      "zfill",      "casefold"};
const std::set<std::string, std::less<>> kListMethods = {"count", "index", "copy"};
const std::set<std::string, std::less<>> kListUnsafe = {"append", "clear",  "extend",  "insert",
                                                        "pop",    "remove", "reverse", "sort"};
const std::set<std::string, std::less<>> kDictMethods = {"copy", "get", "items", "keys", "values"};
const std::set<std::string, std::less<>> kDictUnsafe = {"clear", "pop", "popitem", "setdefault",
                                                        "update"};

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined(
      fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
}

bool is_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return kStrMethods.count(name) > 0;
  if (obj.is_list() && !obj.generator) return kListMethods.count(name) > 0;
  if (obj.is_dict() && !obj.namespace_) return kDictMethods.count(name) > 0;
  return false;
}
bool is_unsafe_method(const Value& obj, const std::string& name) {
  if (!name.empty() && name[0] == '_') return true;
  if (obj.is_list() && !obj.generator) return kListUnsafe.count(name) > 0;
  if (obj.is_dict() && !obj.namespace_) return kDictUnsafe.count(name) > 0;
  return false;
}

int64_t find_index(const std::string& s, const std::string& sub, bool from_right) {
  const size_t at = from_right ? s.rfind(sub) : s.find(sub);
  if (at == std::string::npos) return -1;
  return int64_t(char_count(std::string_view(s).substr(0, at)));
}

Value str_method(const std::string& s, const std::string& name, const CallArgs& a) {
  const auto arg = [&](size_t i, const char* n, Value d = Value::undefined()) {
    return a.get(i, n, d);
  };
  if (name == "strip") return Value::string(strip(s, arg(0, "chars"), true, true));
  if (name == "lstrip") return Value::string(strip(s, arg(0, "chars"), true, false));
  if (name == "rstrip") return Value::string(strip(s, arg(0, "chars"), false, true));
  if (name == "split" || name == "rsplit") {
    const Value m = arg(1, "maxsplit", Value::integer(-1));
    return Value::make_list(split(s, arg(0, "sep"), to_int_arg(m, "maxsplit"), name == "rsplit"));
  }
  if (name == "splitlines") {
    List out;
    for (auto& l : splitlines(s, truthy(arg(0, "keepends", Value::boolean(false)))))
      out.push_back(Value::string(std::move(l)));
    return Value::make_list(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    int64_t offset = 0;
    const std::string w = window(s, a, 1, offset);
    if (offset > int64_t(char_count(s))) return Value::boolean(false);
    return Value::boolean(starts_or_ends(w, arg(0, "prefix"), name == "startswith"));
  }
  if (name == "replace") {
    const Value c = arg(2, "count", Value::integer(-1));
    return make_string(replace(s, need_str(arg(0, "old"), "replace arg"),
                               need_str(arg(1, "new"), "replace arg"), to_int_arg(c, "count")));
  }
  if (name == "upper") return Value::string(upper(s));
  if (name == "lower" || name == "casefold") return Value::string(lower(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(capitalize(s));
  if (name == "swapcase") {
    std::string out;
    for (uint32_t c : code_points(s)) append_utf8(out, is_upper(c) ? to_lower(c) : to_upper(c));
    return Value::string(out);
  }
  if (name == "format") return make_string(str_format(s, a));
  if (name == "join") {
    std::string out;
    bool first = true;
    size_t k = 0;
    for (const Value& x : iterate(arg(0, "iterable"))) {
      if (!x.is_string())
        type_error(
            fmt::format("sequence item {}: expected str instance, {} found", k, type_name(x)));
      if (!first) out += s;
      first = false;
      out += x.s;
      check_size(out.size());
      ++k;
    }
    return Value::string(out);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    int64_t offset = 0;
    const std::string w = window(s, a, 1, offset);
    const int64_t at = offset > int64_t(char_count(s))
                           ? -1
                           : find_index(w, need_str(arg(0, "sub"), "find arg"), name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) type_error("substring not found");
    return Value::integer(at < 0 ? -1 : at + offset);
  }
  if (name == "count") {
    int64_t offset = 0;
    const std::string w = window(s, a, 1, offset);
    if (offset > int64_t(char_count(s))) return Value::integer(0);
    const std::string& sub = need_str(arg(0, "sub"), "count arg");
    if (sub.empty()) return Value::integer(int64_t(char_count(w)) + 1);
    int64_t n = 0;
    for (size_t at = w.find(sub); at != std::string::npos; at = w.find(sub, at + sub.size())) ++n;
    return Value::integer(n);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string& x = need_str(arg(0, "affix"), name.c_str());
    if (name == "removeprefix")
      return Value::string(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
    return Value::string(x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0
                             ? s.substr(0, s.size() - x.size())
                             : s);
  }
  if (name == "partition" || name == "rpartition") {
    const std::string& sep = need_str(arg(0, "sep"), name.c_str());
    if (sep.empty()) type_error("empty separator");
    const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos)
      return name == "partition"
                 ? Value::make_list({Value::string(s), Value::string(""), Value::string("")}, true)
                 : Value::make_list({Value::string(""), Value::string(""), Value::string(s)}, true);
    return Value::make_list({Value::string(s.substr(0, at)), Value::string(sep),
                             Value::string(s.substr(at + sep.size()))},
                            true);
  }
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    const int64_t w = std::clamp<int64_t>(to_int_arg(arg(0, "width"), "width"), 0, 100000);
    if (name == "zfill") {
      const size_t len = char_count(s);
      if (size_t(w) <= len) return Value::string(s);
      const bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
      return Value::string((sign ? s.substr(0, 1) : "") + std::string(size_t(w) - len, '0') +
                           (sign ? s.substr(1) : s));
    }
    std::string fill = to_str(arg(1, "fillchar", Value::string(" ")));
    if (char_count(fill) != 1) type_error("The fill character must be exactly one character long");
    const char align = name == "center" ? '^' : name == "ljust" ? '<' : '>';
    if (name == "center") {
      // str.center puts the extra pad on the right only when the width is even... as CPython:
      // left = pad / 2 + (pad & width & 1).
      const size_t len = char_count(s);
      if (size_t(w) <= len) return Value::string(s);
      const size_t pad = size_t(w) - len;
      const size_t left = pad / 2 + (pad & size_t(w) & 1);
      std::string out;
      for (size_t k = 0; k < left; ++k) out += fill;
      out += s;
      for (size_t k = 0; k < pad - left; ++k) out += fill;
      return Value::string(out);
    }
    return Value::string(apply_spec(Value::string(s), fill + align + std::to_string(w)));
  }
  const auto all = [&](bool (*pred)(uint32_t)) {
    std::vector<uint32_t> cps = code_points(s);
    return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
  };
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
    return Value::boolean(all(is_digit));
  if (name == "isalpha") return Value::boolean(all(is_alpha));
  if (name == "isalnum")
    return Value::boolean(all([](uint32_t c) { return is_alpha(c) || is_digit(c); }));
  if (name == "isspace") return Value::boolean(all(is_py_space));
  if (name == "isupper" || name == "islower") {
    bool cased = false, ok = true;
    for (uint32_t c : code_points(s)) {
      if (is_upper(c)) cased = true, ok = ok && name == "isupper";
      if (is_lower(c)) cased = true, ok = ok && name == "islower";
    }
    return Value::boolean(cased && ok);
  }
  if (name == "istitle") return Value::boolean(!s.empty() && py_title(s) == s && lower(s) != s);
  type_error(fmt::format("'str' object has no attribute '{}'", name));
}

Value list_method(const Value& obj, const std::string& name, const CallArgs& a) {
  const List& l = *obj.list;
  if (name == "copy") return Value::make_list(l);
  const Value x = a.get(0, "value");
  if (name == "count")
    return Value::integer(
        std::count_if(l.begin(), l.end(), [&](const Value& y) { return equals(x, y); }));
  for (size_t k = 0; k < l.size(); ++k)
    if (equals(l[k], x)) return Value::integer(int64_t(k));
  type_error(fmt::format("{} is not in list", repr(x)));
}

Value dict_method(const Value& obj, const std::string& name, const CallArgs& a) {
  const Dict& d = *obj.dict;
  if (name == "get") {
    const Value* v = d.find(a.get(0, "key"));
    return v ? *v : a.get(1, "default", Value::none());
  }
  if (name == "copy") {
    Value c = Value::make_dict();
    c.dict->items = d.items;
    return c;
  }
  List out;
  for (const auto& [k, v] : d.items)
    out.push_back(name == "keys" ? k : name == "values" ? v : Value::make_list({k, v}, true));
  return Value::make_list(std::move(out));
}

Value normalize_index(const Value& key) {
  if (key.kind == Value::Kind::Bool) return Value::integer(key.b);
  return key;
}

}  // namespace

bool has_filter(std::string_view name) { return filters().count(name) > 0; }
bool has_test(std::string_view name) { return tests().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) type_error(fmt::format("No filter named '{}'.", name));
  return it->second(input, args);
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) type_error(fmt::format("No test named '{}'.", name));
  return it->second(v, args);
}

Value call_method(const Value& obj, const std::string& name, const CallArgs& args) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict() && !obj.namespace_ && !is_method(obj, name) && !is_unsafe_method(obj, name)) {
    Value v = get_attr(obj, name);
    CallArgs copy = args;
    return call(v, copy);
  }
  if (obj.is_dict() && obj.namespace_) {
    Value v = get_attr(obj, name);
    CallArgs copy = args;
    return call(v, copy);
  }
  if (is_unsafe_method(obj, name)) fail_undefined(unsafe(obj, name));
  if (!is_method(obj, name))
    fail_undefined(
        Value::undefined(fmt::format("'{}' has no attribute '{}'", object_desc(obj), name)));
  if (obj.is_string()) {
    Value r = str_method(obj.s, name, args);
    if (obj.markup && r.is_string()) r.markup = true;
    return r;
  }
  if (obj.is_list()) return list_method(obj, name, args);
  return dict_method(obj, name, args);
}

Value call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) fail_undefined(fn);
  if (fn.kind != Value::Kind::Function)
    type_error(fmt::format("'{}' object is not callable", type_name(fn)));
  return (*fn.fn)(args);
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!name.empty() && name[0] == '_') {
    // No attribute of this name is safe; a dict may still hold an item with that key.
    if (obj.is_dict()) {
      if (const Value* v = obj.dict->find(Value::string(name))) return *v;
    }
    if (name.size() > 1 && name[1] == '_') return unsafe(obj, name);
    return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_desc(obj), name));
  }
  if (is_unsafe_method(obj, name)) return unsafe(obj, name);
  // groupby's (grouper, list) pairs are named tuples.
  if (obj.is_list() && obj.tuple && obj.list->size() == 2 && (name == "grouper" || name == "list"))
    return (*obj.list)[name == "grouper" ? 0 : 1];
  if (is_method(obj, name)) {
    Value self = obj;
    return Value::function(name, [self, name](CallArgs& a) { return call_method(self, name, a); });
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.dict->find(Value::string(name))) return *v;
  }
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_desc(obj), name));
}

Value get_item(const Value& obj, const Value& raw_key) {
  if (obj.is_undefined()) fail_undefined(obj);
  const Value key = normalize_index(raw_key);
  if (obj.is_dict() && !obj.namespace_) {
    if (const Value* v = obj.dict->find(raw_key)) return *v;
  } else if ((obj.is_list() && !obj.generator) || obj.is_string()) {
    if (key.kind == Value::Kind::Int) {
      if (obj.is_list()) {
        const int64_t n = int64_t(obj.list->size());
        const int64_t k = key.i < 0 ? key.i + n : key.i;
        if (k >= 0 && k < n) return (*obj.list)[size_t(k)];
      } else {
        std::vector<uint32_t> cps = code_points(obj.s);
        const int64_t n = int64_t(cps.size());
        const int64_t k = key.i < 0 ? key.i + n : key.i;
        if (k >= 0 && k < n) return Value::string(encode(cps, size_t(k), size_t(k) + 1));
      }
    }
  }
  if (raw_key.is_string()) return get_attr(obj, raw_key.s);
  return Value::undefined(fmt::format("'{}' has no element {}", object_desc(obj), repr(raw_key)));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  const auto opt = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (v.kind == Value::Kind::Int) return v.i;
    if (v.kind == Value::Kind::Bool) return v.b;
    type_error(fmt::format("slice {} must be an integer or None", what));
  };
  const std::optional<int64_t> b = opt(start, "indices"), e = opt(stop, "indices"),
                               s = opt(step, "indices");
  const int64_t st = s.value_or(1);
  if (st == 0) type_error("slice step cannot be zero");
  std::vector<uint32_t> cps;
  int64_t n;
  if (obj.is_string()) {
    cps = code_points(obj.s);
    n = int64_t(cps.size());
  } else if (obj.is_list() && !obj.generator) {
    n = int64_t(obj.list->size());
  } else {
    return Value::undefined(fmt::format("'{}' has no element slice", object_desc(obj)));
  }
  const auto clamp_index = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t lo = clamp_index(b, st > 0 ? 0 : n - 1);
  const int64_t hi = clamp_index(e, st > 0 ? n : -1);
  std::vector<size_t> idx;
  if (st > 0)
    for (int64_t k = lo; k < hi; k += st) idx.push_back(size_t(k));
  else
    for (int64_t k = lo; k > hi; k += st) idx.push_back(size_t(k));
  if (obj.is_string()) {
    std::string out;
    for (size_t k : idx) append_utf8(out, cps[k]);
    return Value::string(out);
  }
  List out;
  for (size_t k : idx) out.push_back((*obj.list)[k]);
  return Value::make_list(std::move(out), obj.tuple);
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::List:
      return *v.list;
    case Value::Kind::Dict: {
      if (v.namespace_) break;
      List keys;
      for (const auto& kv : v.dict->items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::String: {
      List out;
      for (uint32_t c : code_points(v.s)) {
        std::string s;
        append_utf8(s, c);
        out.push_back(Value::string(std::move(s)));
      }
      return out;
    }
    default:
      break;
  }
  type_error(fmt::format("'{}' object is not iterable", type_name(v)));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Value::Kind::Undefined:
      return false;
    case Value::Kind::String:
      if (!item.is_string()) {
        if (item.is_undefined()) fail_undefined(item);
        type_error(
            fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      }
      return container.s.find(item.s) != std::string::npos;
    case Value::Kind::List:
      for (const Value& x : *container.list)
        if (equals(x, item)) return true;
      return false;
    case Value::Kind::Dict:
      if (container.namespace_) break;
      return container.dict->find(item) != nullptr;
    default:
      break;
  }
  type_error(fmt::format("argument of type '{}' is not iterable", type_name(container)));
}

namespace {

int64_t as_int(const Value& v) { return v.kind == Value::Kind::Bool ? int64_t(v.b) : v.i; }
bool intlike(const Value& v) { return v.kind == Value::Kind::Int || v.kind == Value::Kind::Bool; }

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (op == "+" && a.is_string())
    type_error(fmt::format("can only concatenate str (not \"{}\") to str", type_name(b)));
  if (op == "+" && a.is_list() && !a.tuple)
    type_error(fmt::format("can only concatenate list (not \"{}\") to list", type_name(b)));
  type_error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a),
                         type_name(b)));
}

Value repeat(const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::make_list({}, seq.tuple);
  if (seq.is_string()) {
    check_size(seq.s.size() * size_t(std::min<int64_t>(n, int64_t(kMaxValueBytes) + 1)));
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(out);
  }
  check_size(seq.list->size() * size_t(std::min<int64_t>(n, int64_t(kMaxValueBytes) + 1)) * 8);
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::make_list(std::move(out), seq.tuple);
}

double py_fmod(double x, double y) {
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return m;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return make_string(to_str(a) + to_str(b));
  if (op == "==") return Value::boolean(equals(a, b));
  const bool both_int = intlike(a) && intlike(b);
  const bool both_num = a.is_number() && b.is_number();
  if (op == "+") {
    if (both_int) {
      int64_t r;
      if (__builtin_add_overflow(as_int(a), as_int(b), &r)) type_error("integer overflow");
      return Value::integer(r);
    }
    if (both_num) return Value::number(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      if (a.markup || b.markup) return markup(escaped(a) + escaped(b));
      return make_string(a.s + b.s);
    }
    if (a.is_list() && b.is_list() && a.tuple == b.tuple && !a.generator && !b.generator) {
      check_size((a.list->size() + b.list->size()) * 8);
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(out), a.tuple);
    }
    bad_operands(op, a, b);
  }
  if (op == "-") {
    if (both_int) {
      int64_t r;
      if (__builtin_sub_overflow(as_int(a), as_int(b), &r)) type_error("integer overflow");
      return Value::integer(r);
    }
    if (both_num) return Value::number(a.as_double() - b.as_double());
    bad_operands(op, a, b);
  }
  if (op == "*") {
    if (both_int) {
      int64_t r;
      if (__builtin_mul_overflow(as_int(a), as_int(b), &r)) type_error("integer overflow");
      return Value::integer(r);
    }
    if (both_num) return Value::number(a.as_double() * b.as_double());
    if ((a.is_string() || (a.is_list() && !a.generator)) && intlike(b)) return repeat(a, as_int(b));
    if ((b.is_string() || (b.is_list() && !b.generator)) && intlike(a)) return repeat(b, as_int(a));
    bad_operands(op, a, b);
  }
  if (op == "/") {
    if (!both_num) bad_operands(op, a, b);
    if (b.as_double() == 0) type_error("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!both_num) bad_operands(op, a, b);
    if (both_int) {
      const int64_t x = as_int(a), y = as_int(b);
      if (y == 0) type_error("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) type_error("integer overflow");
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return Value::integer(q);
    }
    if (b.as_double() == 0) type_error("float floor division by zero");
    return Value::number(std::floor(a.as_double() / b.as_double()));
  }
  if (op == "%") {
    if (a.is_string()) return make_string(percent_format(a.s, b));
    if (!both_num) bad_operands(op, a, b);
    if (both_int) {
      const int64_t x = as_int(a), y = as_int(b);
      if (y == 0) type_error("integer division or modulo by zero");
      if (y == -1) return Value::integer(0);
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::integer(m);
    }
    if (b.as_double() == 0) type_error("float modulo");
    return Value::number(py_fmod(a.as_double(), b.as_double()));
  }
  if (op == "**") {
    if (!both_num) bad_operands(op, a, b);
    if (both_int && as_int(b) >= 0) {
      int64_t r = 1, base = as_int(a), e = as_int(b);
      while (e > 0) {
        if (e & 1)
          if (__builtin_mul_overflow(r, base, &r)) type_error("integer overflow");
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) type_error("integer overflow");
      }
      return Value::integer(r);
    }
    if (a.as_double() == 0 && b.as_double() < 0)
      type_error("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  if (op == "!=") return Value::boolean(!equals(a, b));
  if (op == "<") return Value::boolean(compare(a, b, "<") < 0);
  if (op == ">") return Value::boolean(compare(a, b, ">") > 0);
  if (op == "<=") return Value::boolean(compare(a, b, "<=") <= 0);
  if (op == ">=") return Value::boolean(compare(a, b, ">=") >= 0);
  if (op == "in") return Value::boolean(contains(b, a));
  if (op == "not in") return Value::boolean(!contains(b, a));
  type_error(fmt::format("unknown operator {}", op));
}

}  // namespace ps::jinja
