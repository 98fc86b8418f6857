#pragma once
// Tokens -> statements, with jinja2's grammar and operator precedence. Unknown tags, filters
// and tests are errors here, before anything renders, as jinja2 reports them when it compiles.
#include <vector>

#include "template/ast.h"
#include "template/lexer.h"

namespace ps::jinja {

// TemplateError with the line on a syntax error.
Body parse(const std::vector<Token>& tokens);

}  // namespace ps::jinja
