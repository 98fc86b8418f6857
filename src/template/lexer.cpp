#include "template/lexer.h"

#include <fmt/format.h>

#include <cctype>

#include "template/value.h"

namespace ps::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A string literal's body with Python's escapes applied; unknown escapes stay as written.
std::string decode_string(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    switch (c) {
      case '\n':
        break;
      case '\\':
      case '\'':
      case '"':
        out += c;
        break;
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (size_t k = 0; k < n; ++k) {
          const int h = i + 1 + k < body.size() ? hex_value(body[i + 1 + k]) : -1;
          if (h < 0) throw TemplateError(fmt::format("truncated \\{} escape in a string", c), line);
          cp = cp << 4 | uint32_t(h);
        }
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
          throw TemplateError("a string escape names no character", line);
        append_utf8(out, cp);
        i += n;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = uint32_t(c - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k)
            cp = cp * 8 + uint32_t(body[++i] - '0');
          append_utf8(out, cp);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& o) : src_(normalize_newlines(source)), opt_(o) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t open = find_tag(pos_);
      if (open == std::string::npos) {
        emit_text(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      std::string text = src_.substr(pos_, open - pos_);
      strip_before(text, sign, kind != '{');
      emit_text(text);
      line_ += count_lines(src_, pos_, open);
      pos_ = open + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      line_starting_ = false;
      if (kind == '#') {
        comment();
      } else if (kind == '%' && raw_begins()) {
        raw();
      } else {
        tag(kind == '{');
      }
    }
    tokens_.push_back({Token::Kind::End, "", line_});
    return std::move(tokens_);
  }

 private:
  std::string src_;
  LexOptions opt_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;

  static int count_lines(const std::string& s, size_t from, size_t to) {
    int n = 0;
    for (size_t i = from; i < to && i < s.size(); ++i) n += s[i] == '\n';
    return n;
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  void emit_text(const std::string& text) {
    if (!text.empty()) tokens_.push_back({Token::Kind::Text, text, line_});
  }

  // `{%-` strips all whitespace before the tag; otherwise lstrip_blocks strips the spaces and
  // tabs that start the tag's line, for block and comment tags.
  void strip_before(std::string& text, char sign, bool block_or_comment) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && is_space(text[end - 1])) --end;
      text.resize(end);
    } else if (sign != '+' && opt_.lstrip_blocks && block_or_comment) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting_) {
        bool blank = l_pos < text.size();
        for (size_t i = l_pos; i < text.size(); ++i) blank = blank && is_space(text[i]);
        if (blank) text.resize(l_pos);
      }
    }
  }

  // After a tag's closing delimiter at `at` (its length `n`): `-` eats all whitespace after,
  // trim_blocks one newline (block and comment tags, not after `+`).
  void close_tag(size_t at, size_t n, char sign, bool trim) {
    pos_ = at + n;
    if (sign == '-') {
      while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
    } else if (sign != '+' && trim && opt_.trim_blocks && pos_ < src_.size() &&
               src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  void comment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) throw TemplateError("missing end of comment tag", line_);
    line_ += count_lines(src_, pos_, end);
    const char sign =
        end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    close_tag(end, 2, sign, true);
  }

  size_t skip_spaces(size_t p) const {
    while (p < src_.size() && is_space(src_[p])) ++p;
    return p;
  }

  bool word_at(size_t p, std::string_view w) const {
    return src_.compare(p, w.size(), w) == 0 &&
           (p + w.size() >= src_.size() ||
            !(std::isalnum(uint8_t(src_[p + w.size()])) || src_[p + w.size()] == '_'));
  }

  // `{% raw %}`: the tag holds only the word raw.
  bool raw_begins() const {
    size_t p = skip_spaces(pos_);
    if (!word_at(p, "raw")) return false;
    p = skip_spaces(p + 3);
    return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
  }

  void raw() {
    size_t p = skip_spaces(pos_) + 3;
    p = skip_spaces(p);
    line_ += count_lines(src_, pos_, p);
    if (src_[p] == '-') {
      pos_ = p + 3;
      while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
    } else {
      pos_ = p + 2;  // no trim_blocks after {% raw %}, as jinja2
    }
    line_starting_ = false;
    // The body runs to the first {% endraw %}.
    for (size_t at = src_.find("{%", pos_); at != std::string::npos; at = src_.find("{%", at + 1)) {
      size_t q = at + 2;
      const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      q = skip_spaces(q);
      if (!word_at(q, "endraw")) continue;
      q = skip_spaces(q + 6);
      char end_sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string body = src_.substr(pos_, at - pos_);
      strip_before(body, sign, true);
      emit_text(body);
      line_ += count_lines(src_, pos_, q);
      close_tag(q, 2, end_sign, true);
      return;
    }
    throw TemplateError("missing end of raw directive", line_);
  }

  void tag(bool variable) {
    tokens_.push_back({variable ? Token::Kind::VarBegin : Token::Kind::BlockBegin, "", line_});
    std::vector<char> balance;
    const std::string close = variable ? "}}" : "%}";
    for (;;) {
      if (pos_ >= src_.size())
        throw TemplateError(
            fmt::format("unexpected end of template, expected the end of the {} tag",
                        variable ? "print" : "block"),
            line_);
      const char c = src_[pos_];
      if (balance.empty()) {
        const char sign = c == '-' || c == '+' ? c : 0;
        const size_t at = pos_ + (sign ? 1 : 0);
        if (src_.compare(at, 2, close) == 0 && (sign != '+' || !variable)) {
          tokens_.push_back({variable ? Token::Kind::VarEnd : Token::Kind::BlockEnd, "", line_});
          close_tag(at, 2, sign, !variable);
          return;
        }
      }
      if (is_space(c)) {
        line_ += c == '\n';
        ++pos_;
        continue;
      }
      if (c == '"' || c == '\'') {
        string_literal(c);
        continue;
      }
      if (std::isdigit(uint8_t(c))) {
        number();
        continue;
      }
      if (std::isalpha(uint8_t(c)) || c == '_' || uint8_t(c) >= 0x80) {
        size_t e = pos_;
        while (e < src_.size() &&
               (std::isalnum(uint8_t(src_[e])) || src_[e] == '_' || uint8_t(src_[e]) >= 0x80))
          ++e;
        tokens_.push_back({Token::Kind::Name, src_.substr(pos_, e - pos_), line_});
        pos_ = e;
        continue;
      }
      static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "/",
                                         "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                         "<",  ">",  "=",  ".",  ":",  "|",  ",", ";"};
      std::string op;
      for (const char* o : kOps)
        if (src_.compare(pos_, std::char_traits<char>::length(o), o) == 0) {
          op = o;
          break;
        }
      if (op.empty()) throw TemplateError(fmt::format("unexpected char {:?}", c), line_);
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        if (balance.size() > 256) throw TemplateError("brackets nested too deeply", line_);
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty() || balance.back() != op[0])
          throw TemplateError(fmt::format("unexpected '{}'", op), line_);
        balance.pop_back();
      }
      tokens_.push_back({Token::Kind::Operator, op, line_});
      pos_ += op.size();
    }
  }

  void string_literal(char q) {
    size_t e = pos_ + 1;
    while (e < src_.size() && src_[e] != q) e += src_[e] == '\\' ? 2 : 1;
    if (e >= src_.size()) throw TemplateError(fmt::format("unexpected char '{}'", q), line_);
    const int line = line_;
    tokens_.push_back({Token::Kind::String,
                       decode_string(std::string_view(src_).substr(pos_ + 1, e - pos_ - 1), line),
                       line});
    line_ += count_lines(src_, pos_, e);
    pos_ = e + 1;
  }

  void number() {
    size_t e = pos_;
    if (src_[pos_] == '0' && pos_ + 2 < src_.size() &&
        (src_[pos_ + 1] == 'x' || src_[pos_ + 1] == 'X' || src_[pos_ + 1] == 'o' ||
         src_[pos_ + 1] == 'O' || src_[pos_ + 1] == 'b' || src_[pos_ + 1] == 'B')) {
      const char kind = char(std::tolower(uint8_t(src_[pos_ + 1])));
      const int base = kind == 'x' ? 16 : kind == 'o' ? 8 : 2;
      e = pos_ + 2;
      unsigned long long v = 0;
      bool any = false;
      for (; e < src_.size(); ++e) {
        if (src_[e] == '_') continue;
        const int d = hex_value(src_[e]);
        if (d < 0 || d >= base) break;
        if (v > (~0ull - unsigned(d)) / unsigned(base))
          throw TemplateError("integer literal too large", line_);
        v = v * unsigned(base) + unsigned(d);
        any = true;
      }
      if (!any) throw TemplateError("malformed integer literal", line_);
      tokens_.push_back({Token::Kind::Integer, std::to_string(v), line_});
      pos_ = e;
      return;
    }
    // After a '.', digits are an index (`x.0.1`), never a float's fraction.
    const bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
    const auto digits = [&](size_t& p) {
      const size_t start = p;
      while (p < src_.size() && (std::isdigit(uint8_t(src_[p])) ||
                                 (src_[p] == '_' && p > start && p + 1 < src_.size() &&
                                  std::isdigit(uint8_t(src_[p + 1])))))
        ++p;
      return p > start;
    };
    digits(e);
    bool is_float = false;
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && std::isdigit(uint8_t(src_[e + 1]))) {
      ++e;
      digits(e);
      is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t p = e + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (digits(p)) e = p, is_float = true;
    }
    std::string text;
    for (size_t i = pos_; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    // A name may not start right after a number (`1abc`).
    if (e < src_.size() && (std::isalpha(uint8_t(src_[e])) || src_[e] == '_'))
      throw TemplateError(fmt::format("unexpected char {:?} after a number", src_[e]), line_);
    tokens_.push_back({is_float ? Token::Kind::Float : Token::Kind::Integer, text, line_});
    pos_ = e;
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace ps::jinja
