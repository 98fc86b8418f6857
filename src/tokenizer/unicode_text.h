#pragma once
// UTF-8 helpers with llama.cpp's exact leniency, and GPT-2's byte <-> unicode mapping.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ps::unicode {

constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence a lead byte announces (1 for stray continuation bytes), taken
// from the top four bits only: tokenizers split symbols this way even in invalid input.
inline size_t utf8_sequence_length(char lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[uint8_t(lead) >> 4];
}

// Strictly: the length of the sequence lead byte `b` starts (0 for a continuation byte or a
// byte no well-formed sequence starts with), its payload bits in `bits`.
inline size_t utf8_lead(uint8_t b, uint32_t& bits) {
  if (b < 0x80) return bits = b, 1;
  if ((b >> 5) == 0x6) return bits = b & 0x1Fu, 2;
  if ((b >> 4) == 0xE) return bits = b & 0x0Fu, 3;
  if ((b >> 3) == 0x1E) return bits = b & 0x07u, 4;
  return 0;
}
// The smallest code point a sequence of `len` bytes may encode (a smaller one is overlong).
inline uint32_t utf8_least(size_t len) {
  return len <= 1 ? 0 : len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
}

// Decodes UTF-8; each byte that does not start a well-formed sequence becomes U+FFFD on its
// own. Overlong forms are accepted, as llama.cpp does.
std::vector<uint32_t> decode_utf8(std::string_view text);

// Appends the UTF-8 form of `cp`; code points above U+10FFFF become U+FFFD.
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's reversible map from bytes to printable code points ("Ġ" for space, ...).
const std::string& byte_to_unicode(uint8_t byte);
// The byte a code point stands for in that map, or -1.
int unicode_to_byte(uint32_t cp);

// Unicode White_Space, the set Hugging Face tokenizers and llama.cpp treat as \s.
bool is_white_space(uint32_t cp);

// General categories (unicode_tables.cpp): P*, C* (unassigned included), M*, S*.
bool is_punctuation(uint32_t cp);
bool is_control(uint32_t cp);
bool is_mark(uint32_t cp);
bool is_symbol(uint32_t cp);
// Simple lowercase mapping (the first code point of the full mapping).
uint32_t to_lower(uint32_t cp);
// The first code point of the canonical decomposition: the base letter of an accented one.
uint32_t nfd_first(uint32_t cp);

}  // namespace ps::unicode
