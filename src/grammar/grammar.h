#pragma once
// Context-free grammars over Unicode code points, for constrained decoding: the form llama.cpp
// reads (GBNF), parsed into rules whose alternatives are sequences of character sets and rule
// references. Repetitions (* + ? {m,n}) become rules of their own, so the matcher
// (grammar/matcher.h) sees only sets, references and sequence ends.
//
// GBNF, as accepted here:
//   rule    ::= name "::=" alternatives        (a newline ends a rule outside parentheses)
//   name    ::= [a-zA-Z0-9_-]+
//   item    ::= "literal" | [set] | [^set] | . | name | ( alternatives ) , then * + ? {m} {m,}
//               {m,n}
// Escapes in literals and sets: \n \r \t \\ \" \] \[ \- \xHH \uHHHH \UHHHHHHHH. Comments run
// from # to the end of the line. The start is the rule `root`.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ps::grammar {

class GrammarError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Code points in inclusive ranges, or every code point outside them.
struct CharSet {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool negated = false;
  bool contains(uint32_t c) const {
    for (const auto& [lo, hi] : ranges)
      if (c >= lo && c <= hi) return !negated;
    return negated;
  }
  // Whether some code point in [lo, hi] is in the set.
  bool intersects(uint32_t lo, uint32_t hi) const;
};

struct Symbol {
  enum class Type : uint8_t { chars, rule, end } type = Type::end;
  uint32_t index = 0;  // into Grammar::sets or Grammar::rules
};

struct Rule {
  std::string name;
  // Each alternative's first symbol in Grammar::code; every alternative ends with an `end`.
  std::vector<uint32_t> alternatives;
};

struct Grammar {
  std::vector<Rule> rules;
  std::vector<CharSet> sets;
  std::vector<Symbol> code;  // the alternatives' symbols, each run ending in `end`
  uint32_t root = 0;

  // Parses GBNF; GrammarError naming the line and what is wrong (an undefined rule, no root,
  // left recursion, a syntax error).
  static Grammar parse(std::string_view gbnf);
  // The grammar as GBNF again (the generated repetition rules included), for messages and
  // tests.
  std::string to_gbnf() const;
};

}  // namespace ps::grammar
