#pragma once
// The parsed template: expressions and statements as jinja2's parser builds them.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace ps::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    List,     // args: items
    Tuple,    // args: items
    Dict,     // args: key, value, key, value, ...
    GetAttr,  // args[0].name
    GetItem,  // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]], absent parts null
    Call,     // args[0](args[1:], kwargs)
    Filter,   // args[0] | name(args[1:], kwargs); args[0] null in a filter block's chain
    Test,     // args[0] is [not] name(args[1:], kwargs)
    Unary,    // name ("-", "+", "not") args[0]
    Binary,   // args[0] name args[1]: + - * / // % ** ~
    And,      // args[0] and args[1]
    Or,       // args[0] or args[1]
    Compare,  // args[0] ops[0] args[1] ops[1] args[2] ...
    Cond,     // args[1] if args[0] else args[2] (null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;  // `is not`
};

// Where `set`, `for` and `with` put values: a name, a namespace's attribute, or names to
// unpack.
struct Target {
  enum class Kind { Name, Attribute, Names };
  Kind kind = Kind::Name;
  std::string name;  // Name; Attribute: the namespace variable
  std::string attribute;
  std::vector<std::string> names;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Macro {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
};

struct Stmt {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // branches, else_body
    For,          // target in expr [if filter] body, else_body
    Set,          // target = expr
    SetBlock,     // target = body | filters
    Macro,        // macro
    CallBlock,    // {% call(macro params) expr %} macro.body {% endcall %}
    FilterBlock,  // body | filters
    With,         // assignments, body
    Break,
    Continue,
    Block,  // body rendered in place ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;  // For: the loop filter; SetBlock/FilterBlock: the filter chain
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::pair<Target, ExprPtr>> assignments;
  std::shared_ptr<Macro> macro;
  bool recursive = false;
};

}  // namespace ps::jinja
