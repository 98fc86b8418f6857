#pragma once
// Where a text stands in a grammar (grammar/grammar.h), byte by byte, for constrained decoding:
// a set of stacks of positions in the grammar's sequences, each stack one way the text so far
// can continue. A token is allowed when its bytes leave some stack alive; a text may end when
// some stack is empty (the root rule complete) and no UTF-8 character is cut.
//
// Stacks are kept short by tail calls (a reference at the end of a sequence replaces its caller
// instead of stacking on it), so `x*` runs in constant stack depth; left recursion is refused
// when the grammar is parsed.
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"

namespace ps::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Whether these bytes can follow what was accepted (UTF-8 characters may be cut at either
  // end, as token pieces cut them).
  bool allows(std::string_view bytes) const;
  // Accepts the bytes; false (and nothing changed) when they are not allowed.
  bool accept(std::string_view bytes);
  // Whether the text so far is a complete sentence of the grammar.
  bool can_end() const;
  // Whether anything at all may follow (false: only the end is left).
  bool can_continue() const;
  void reset();

  const Grammar& grammar() const { return *g_; }

 private:
  using Stack = std::vector<uint32_t>;  // positions in Grammar::code, the innermost last
  struct State {
    std::vector<Stack> stacks;
    uint32_t partial = 0;  // the bits of a cut UTF-8 character
    int need = 0;          // its continuation bytes still to come
    uint32_t least = 0;    // the smallest code point its length may encode (no overlong forms)
  };
  // Every stack reached from `s` by entering rules and leaving finished sequences, until each
  // top is a character set or the stack is empty.
  struct StackHash {
    size_t operator()(const Stack& s) const;
  };
  using Seen = std::unordered_set<Stack, StackHash>;
  void expand(Stack s, std::vector<Stack>& out, Seen& seen) const;
  void advance(const std::vector<Stack>& in, uint32_t c, std::vector<Stack>& out) const;
  bool step(State& st, std::string_view bytes) const;
  // Whether some stack's next set holds a character in [lo, hi].
  bool any_in(const std::vector<Stack>& stacks, uint32_t lo, uint32_t hi) const;

  std::shared_ptr<const Grammar> g_;
  State st_;
};

}  // namespace ps::grammar
