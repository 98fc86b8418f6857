#include "template/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/text.h"

namespace ps::jinja {

Value Value::undefined(std::string why) {
  Value v;
  v.s = std::move(why);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool, v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int, v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float, v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::String, v.s = std::move(x);
  return v;
}
Value Value::make_list(List items, bool tuple) {
  Value v;
  v.kind = Kind::List, v.tuple = tuple;
  v.list = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::make_dict() {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Dict>();
  return v;
}
Value Value::function(std::string name, Function f) {
  Value v;
  v.kind = Kind::Function, v.s = std::move(name);
  v.fn = std::make_shared<Function>(std::move(f));
  return v;
}

const Value* Dict::find(const Value& key) const {
  for (const auto& kv : items)
    if (equals(kv.first, key)) return &kv.second;
  return nullptr;
}
Value* Dict::find(const Value& key) {
  for (auto& kv : items)
    if (equals(kv.first, key)) return &kv.second;
  return nullptr;
}
void Dict::set(const Value& key, Value v) {
  if (Value* p = find(key))
    *p = std::move(v);
  else
    items.emplace_back(key, std::move(v));
}

Value CallArgs::get(size_t i, std::string_view name, Value fallback) const {
  if (i < pos.size()) return pos[i];
  for (const auto& [k, v] : kw)
    if (k == name) return v;
  return fallback;
}

void fail_undefined(const Value& v) {
  throw TemplateError(v.s.empty() ? std::string("a value is undefined") : v.s);
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return false;
    case Value::Kind::Bool:
      return v.b;
    case Value::Kind::Int:
      return v.i != 0;
    case Value::Kind::Float:
      return v.f != 0;
    case Value::Kind::String:
      return !v.s.empty();
    case Value::Kind::List:
      return v.generator || !v.list->empty();
    case Value::Kind::Dict:
      return !v.dict->items.empty();
    case Value::Kind::Function:
      return true;
  }
  return false;
}

std::string format_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  // The shortest digits that read back as x, then Python's layout: positional for decimal
  // exponents -4..15, scientific outside.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e + 1));
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
    return out;
  }
  if (exp < 0) {
    out += "0." + std::string(size_t(-exp - 1), '0') + digits;
  } else if (size_t(exp) + 1 >= digits.size()) {
    out += digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
  }
  return out;
}

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {  // not UTF-8: the byte stands for itself
      out.push_back(uint8_t(s[i]));
      ++i;
      continue;
    }
    uint32_t cp = n == 1 ? uint8_t(s[i]) : uint8_t(s[i]) & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) cp = cp << 6 | (uint8_t(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += n;
  }
  return out;
}

size_t char_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t k = utf8_sequence_length(s, i);
    i += k ? k : 1;
    ++n;
  }
  return n;
}

bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

namespace {

// Characters Python's repr() escapes (str.isprintable() false), approximately: controls,
// separators and formatting characters.
bool py_printable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f))
    return false;
  if ((cp >= 0x205f && cp <= 0x206f) || cp == 0x3000 || cp == 0xfeff) return false;
  if ((cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0xe000 && cp <= 0xf8ff)) return false;
  return true;
}

std::string repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (uint32_t cp : code_points(s)) {
    if (cp == uint32_t(q) || cp == '\\') {
      out += '\\', out += char(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!py_printable(cp)) {
      out += cp < 0x100     ? fmt::format("\\x{:02x}", cp)
             : cp < 0x10000 ? fmt::format("\\u{:04x}", cp)
                            : fmt::format("\\U{:08x}", cp);
    } else {
      append_utf8(out, cp);
    }
  }
  out += q;
  return out;
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::String:
      return repr_string(v.s);
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::List: {
      if (v.generator) return "<generator object>";
      std::string out(1, v.tuple ? '(' : '[');
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += repr((*v.list)[k]);
      }
      if (v.tuple && v.list->size() == 1) out += ',';
      out += v.tuple ? ')' : ']';
      return out;
    }
    case Value::Kind::Dict: {
      std::string out = v.namespace_ ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(x);
      }
      return out + (v.namespace_ ? "}>" : "}");
    }
    default:
      return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::None:
      return "None";
    case Value::Kind::Bool:
      return v.b ? "True" : "False";
    case Value::Kind::Int:
      return std::to_string(v.i);
    case Value::Kind::Float:
      return format_float(v.f);
    case Value::Kind::String:
      return v.s;
    case Value::Kind::List:
    case Value::Kind::Dict:
      return repr(v);
    case Value::Kind::Function:
      return fmt::format("<function {}>", v.s);
  }
  return "";
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::None:
      return "NoneType";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Int:
      return "int";
    case Value::Kind::Float:
      return "float";
    case Value::Kind::String:
      return "str";
    case Value::Kind::List:
      return v.generator ? "generator" : v.tuple ? "tuple" : "list";
    case Value::Kind::Dict:
      return v.namespace_ ? "Namespace" : "dict";
    case Value::Kind::Function:
      return "function";
  }
  return "object";
}

std::string object_desc(const Value& v) { return v.is_none() ? "None" : type_name(v) + " object"; }

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float)
      return a.as_double() == b.as_double();
    return (a.kind == Value::Kind::Bool ? int64_t(a.b) : a.i) ==
           (b.kind == Value::Kind::Bool ? int64_t(b.b) : b.i);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.s == b.s;
    case Value::Kind::List:
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equals((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::Kind::Dict:
      if (a.dict == b.dict) return true;
      if (a.namespace_ || b.namespace_ || a.dict->items.size() != b.dict->items.size())
        return false;
      for (const auto& [k, x] : a.dict->items) {
        const Value* y = b.dict->find(k);
        if (!y || !equals(x, *y)) return false;
      }
      return true;
    case Value::Kind::Function:
      return a.fn == b.fn;
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b, const char* op) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const int64_t x = a.kind == Value::Kind::Bool ? a.b : a.i;
    const int64_t y = b.kind == Value::Kind::Bool ? b.b : b.i;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.s.compare(b.s) < 0 ? -1 : a.s == b.s ? 0 : 1;
  if (a.is_list() && b.is_list() && a.tuple == b.tuple) {
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k) {
      if (equals((*a.list)[k], (*b.list)[k])) continue;
      return compare((*a.list)[k], (*b.list)[k], op);
    }
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  }
  throw TemplateError(fmt::format("'{}' not supported between instances of '{}' and '{}'", op,
                                  type_name(a), type_name(b)));
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? Value::integer(int64_t(u)) : Value::number(double(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::make_dict();
      d.dict->items.reserve(j.size());
      // JSON object keys are unique after parsing, so no lookups are needed.
      for (auto it = j.begin(); it != j.end(); ++it)
        d.dict->items.emplace_back(Value::string(it.key()), from_json(it.value()));
      return d;
    }
    default:
      return Value::none();
  }
}

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (uint32_t cp : code_points(s)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp > 0x7e && cp < 0x10000)) {
          out += fmt::format("\\u{:04x}", cp);
        } else if (ensure_ascii && cp >= 0x10000) {
          const uint32_t c = cp - 0x10000;
          out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (c >> 10), 0xdc00 + (c & 0x3ff));
        } else {
          append_utf8(out, cp);
        }
    }
  }
  out += '"';
}

std::string json_key(const Value& k) {
  switch (k.kind) {
    case Value::Kind::String:
      return k.s;
    case Value::Kind::Int:
      return std::to_string(k.i);
    case Value::Kind::Float:
      return format_float(k.f);
    case Value::Kind::Bool:
      return k.b ? "true" : "false";
    case Value::Kind::None:
      return "null";
    default:
      throw TemplateError(
          fmt::format("keys must be str, int, float, bool or None, not {}", type_name(k)));
  }
}

void json_value(std::string& out, const Value& v, const JsonStyle& st, int depth) {
  if (depth > 512) throw TemplateError("tojson: value nested too deeply");
  const auto newline = [&](int d) {
    if (!st.has_indent) return;
    out += '\n';
    for (int k = 0; k < d; ++k) out += st.indent;
  };
  switch (v.kind) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.b ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.i);
      return;
    case Value::Kind::Float:
      out += std::isnan(v.f)   ? "NaN"
             : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity")
                               : format_float(v.f);
      return;
    case Value::Kind::String:
      json_string(out, v.s, st.ensure_ascii);
      return;
    case Value::Kind::List: {
      if (v.generator) break;
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += st.item_sep;
        newline(depth + 1);
        json_value(out, (*v.list)[k], st, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.namespace_) break;
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, x] : v.dict->items) items.emplace_back(json_key(k), &x);
      if (st.sort_keys) {
        for (const auto& [k, x] : v.dict->items)
          if (!k.is_string())
            throw TemplateError("tojson: sort_keys needs keys that are all strings");
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += st.item_sep;
        newline(depth + 1);
        json_string(out, items[k].first, st.ensure_ascii);
        out += st.key_sep;
        json_value(out, *items[k].second, st, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      break;
  }
  throw TemplateError(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_value(out, v, style, 0);
  return out;
}

}  // namespace ps::jinja
