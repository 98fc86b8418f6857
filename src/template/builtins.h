#pragma once
// What templates can call: jinja2's filters and tests, the Python methods of str, list and
// dict that chat templates use, and the sandbox's rules for attributes and items. Mutating
// methods (list.append, dict.update, ...) are refused as jinja2's immutable sandbox refuses
// them; names starting with an underscore lead nowhere.
#include <string>
#include <string_view>

#include "template/value.h"

namespace ps::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);
bool apply_test(const std::string& name, const Value& v, const CallArgs& args);

// obj.name: a dict's item, or a bound method, or an Undefined saying why there is none.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: an item, or (for a string key) what get_attr gives, or an Undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] with Python's rules (absent parts are Undefined).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// obj.name(args): a method call without making the bound method first.
Value call_method(const Value& obj, const std::string& name, const CallArgs& args);
Value call(const Value& fn, CallArgs& args);

// The items a `for` loop visits: a list's items, a dict's keys, a string's characters; an
// Undefined visits nothing. TemplateError for what is not iterable.
List iterate(const Value& v);

// Operators with Python's semantics.
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);

// Upper bound of strings and lists that operators and filters build.
constexpr size_t kMaxValueBytes = 32u << 20;

}  // namespace ps::jinja
