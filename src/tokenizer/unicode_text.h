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
