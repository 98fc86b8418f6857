#pragma once
// The values a chat template computes with, and the Python semantics jinja2 gives them: how
// they print (str and repr), compare, convert to booleans and to JSON. Templates only see data
// (strings, numbers, lists, dicts) and a fixed set of functions: there is no object whose
// attributes lead anywhere else.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tokenizer/unicode_text.h"

namespace ps {

// A template that does not parse or fails while rendering. `raised` when the template itself
// called raise_exception(message); then what() is its message.
class TemplateError : public Error {
 public:
  TemplateError(const std::string& message, int line = 0, bool raised = false)
      : Error(message), message_(message), line_(line), raised_(raised) {}
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  bool raised() const { return raised_; }

 private:
  std::string message_;
  int line_;
  bool raised_;
};

}  // namespace ps

namespace ps::jinja {

struct Value;
using List = std::vector<Value>;
struct Dict;
struct CallArgs;
using Function = std::function<Value(CallArgs&)>;

struct Value {
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Function };
  Kind kind = Kind::Undefined;
  bool tuple = false;  // a List that prints as a tuple
  // A List that is a Python generator (what map, select and friends return): it iterates,
  // but has no length, is always true and is not JSON.
  bool generator = false;
  // A String that is markupsafe's Markup (what `safe` returns): adding a plain string to it
  // HTML-escapes that string, as jinja2 does even without autoescaping.
  bool markup = false;
  bool namespace_ = false;  // a Dict made by namespace(): attributes can be set
  bool b = false;
  int64_t i = 0;
  double f = 0;
  // String: the text (UTF-8). Undefined: what using it says. Function: its name.
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Function> fn;

  static Value undefined(std::string why = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(List items = {}, bool tuple = false);
  static Value make_dict();
  static Value function(std::string name, Function f);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  double as_double() const { return kind == Kind::Float ? f : double(kind == Kind::Bool ? b : i); }
};

struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  Value* find(const Value& key);
  void set(const Value& key, Value v);
};

// Arguments of a call: positional, then keyword.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument at position i or named `name`, else `fallback`.
  Value get(size_t i, std::string_view name, Value fallback = Value::undefined()) const;
};

// Python semantics.
bool truthy(const Value& v);
std::string to_str(const Value& v);  // str(v); Undefined prints as ""
std::string repr(const Value& v);
std::string type_name(const Value& v);  // "str", "int", "list", "NoneType", ...
// jinja2's object_type_repr: "dict object", "None", ...
std::string object_desc(const Value& v);
bool equals(const Value& a, const Value& b);
// <0, 0, >0; TemplateError for values Python does not order ('<' between str and int).
int compare(const Value& a, const Value& b, const char* op = "<");
std::string format_float(double x);  // repr(float)
// Using an Undefined for anything but printing, testing or iterating: the error it carries.
[[noreturn]] void fail_undefined(const Value& v);

// UTF-8 by code point, as Python indexes strings.
std::vector<uint32_t> code_points(std::string_view s);
using unicode::append_utf8;
size_t char_count(std::string_view s);
bool is_py_space(uint32_t cp);

// Data in, JSON out. Key order is kept both ways (Python dicts keep insertion order).
Value from_json(const nlohmann::ordered_json& j);
struct JsonStyle {
  std::string indent;  // one level; without has_indent everything is on one line
  bool has_indent = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string to_json(const Value& v, const JsonStyle& style);

}  // namespace ps::jinja
