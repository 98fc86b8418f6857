#pragma once
// Template source -> tokens, with jinja2's rules for where text ends and tags begin: `-` and `+`
// on tags, trim_blocks (the newline after a block or comment tag is dropped) and lstrip_blocks
// (spaces and tabs before a block or comment tag on its own line are dropped), raw blocks,
// newlines normalized to \n and one trailing newline of the source dropped.
#include <string>
#include <string_view>
#include <vector>

namespace ps::jinja {

struct Token {
  enum class Kind {
    Text,        // literal output
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,
    String,  // value decoded (escapes applied)
    Integer,
    Float,
    Operator,
    End,
  };
  Kind kind;
  std::string value;
  int line;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// TemplateError with the line on malformed input.
std::vector<Token> tokenize(std::string_view source, const LexOptions& options = {});

}  // namespace ps::jinja
