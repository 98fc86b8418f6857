#include "grammar/matcher.h"

#include <algorithm>
#include <unordered_set>

#include "tokenizer/unicode_text.h"

namespace ps::grammar {

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) { reset(); }

void Matcher::reset() {
  st_ = State{};
  Seen seen;
  for (uint32_t alt : g_->rules[g_->root].alternatives) expand(Stack{alt}, st_.stacks, seen);
  std::sort(st_.stacks.begin(), st_.stacks.end());
  st_.stacks.erase(std::unique(st_.stacks.begin(), st_.stacks.end()), st_.stacks.end());
}

size_t Matcher::StackHash::operator()(const Stack& s) const {
  size_t h = s.size();
  for (uint32_t v : s) h = h * 0x9E3779B97F4A7C15ull + v;
  return h;
}

void Matcher::expand(Stack s, std::vector<Stack>& out, Seen& seen) const {
  for (;;) {
    // Paths through rules that can be empty meet again in the same stacks ("x?" nested, or in a
    // row): each stack is followed once per step, so the work stays polynomial.
    if (!seen.insert(s).second) return;
    if (s.empty()) {
      out.push_back(std::move(s));
      return;
    }
    const Symbol sym = g_->code[s.back()];
    if (sym.type == Symbol::Type::end) {
      s.pop_back();  // the sequence is done: its caller goes on
      continue;
    }
    if (sym.type == Symbol::Type::chars) {
      out.push_back(std::move(s));
      return;
    }
    // A reference: the caller resumes after it, unless that is its end (a tail call).
    ++s.back();
    if (g_->code[s.back()].type == Symbol::Type::end) s.pop_back();
    const std::vector<uint32_t>& alts = g_->rules[sym.index].alternatives;
    for (size_t i = 0; i + 1 < alts.size(); ++i) {
      Stack branch = s;
      branch.push_back(alts[i]);
      expand(std::move(branch), out, seen);
    }
    s.push_back(alts.back());
  }
}

void Matcher::advance(const std::vector<Stack>& in, uint32_t c, std::vector<Stack>& out) const {
  out.clear();
  Seen seen;
  for (const Stack& s : in) {
    if (s.empty() || !g_->sets[g_->code[s.back()].index].contains(c)) continue;
    Stack next = s;
    ++next.back();
    expand(std::move(next), out, seen);
  }
  if (out.size() > 1) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
}

bool Matcher::any_in(const std::vector<Stack>& stacks, uint32_t lo, uint32_t hi) const {
  for (const Stack& s : stacks)
    if (!s.empty() && g_->sets[g_->code[s.back()].index].intersects(lo, hi)) return true;
  return false;
}

bool Matcher::step(State& st, std::string_view bytes) const {
  std::vector<Stack> next;
  for (const char ch : bytes) {
    const auto b = uint8_t(ch);
    if (st.need > 0) {
      if ((b & 0xC0) != 0x80) return false;
      st.partial = (st.partial << 6) | (b & 0x3F);
      --st.need;
    } else {
      const size_t len = unicode::utf8_lead(b, st.partial);
      if (len == 0) return false;  // not a UTF-8 lead byte
      st.need = int(len - 1);
      st.least = unicode::utf8_least(len);
    }
    if (st.need > 0) continue;
    // An overlong form (C1 BB for '{'), a surrogate or a code point past U+10FFFF is not UTF-8:
    // byte tokens must not spell a grammar's characters that way.
    if (st.partial < st.least || st.partial > 0x10FFFF ||
        (st.partial >= 0xD800 && st.partial <= 0xDFFF))
      return false;
    advance(st.stacks, st.partial, next);
    if (next.empty()) return false;
    st.stacks.swap(next);
    st.partial = 0;
  }
  if (st.need > 0) {
    // A cut character: some stack must take a character that starts with these bits.
    const uint32_t shift = 6 * uint32_t(st.need);
    const uint32_t lo = std::max(st.partial << shift, st.least);
    const uint32_t hi = std::min<uint32_t>((st.partial << shift) | ((1u << shift) - 1), 0x10FFFF);
    const bool surrogate = lo >= 0xD800 && hi <= 0xDFFF;
    return lo <= hi && !surrogate && any_in(st.stacks, lo, hi);
  }
  return true;
}

bool Matcher::allows(std::string_view bytes) const {
  // Most pieces fail on their first character: that is judged without copying the stacks.
  if (!bytes.empty() && st_.need == 0) {
    uint32_t c = 0;
    const size_t len = unicode::utf8_lead(uint8_t(bytes[0]), c);
    if (len == 0) return false;
    size_t i = 1;
    for (; i < len && i < bytes.size(); ++i) {
      const auto cb = uint8_t(bytes[i]);
      if ((cb & 0xC0) != 0x80) return false;
      c = (c << 6) | (cb & 0x3Fu);
    }
    // A character cut by the piece's end: the range of those it could be (in the shortest
    // form only).
    const uint32_t least = unicode::utf8_least(len);
    const uint32_t shift = 6 * uint32_t(len - i);
    const uint32_t lo = std::max(c << shift, least);
    const uint32_t hi = std::min<uint32_t>((c << shift) | ((1u << shift) - 1), 0x10FFFF);
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF) || !any_in(st_.stacks, lo, hi)) return false;
    if (bytes.size() == len) return true;  // a stack that takes it always leaves one after it
  }
  State copy = st_;
  return step(copy, bytes);
}

bool Matcher::accept(std::string_view bytes) {
  State next = st_;
  if (!step(next, bytes)) return false;
  st_ = std::move(next);
  return true;
}

bool Matcher::can_end() const {
  if (st_.need > 0) return false;
  for (const Stack& s : st_.stacks)
    if (s.empty()) return true;
  return false;
}

bool Matcher::can_continue() const {
  for (const Stack& s : st_.stacks)
    if (!s.empty()) return true;
  return false;
}

}  // namespace ps::grammar
