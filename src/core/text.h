#pragma once
// Text from files and requests shown to people: always valid UTF-8, never terminal controls.
#include <cstddef>
#include <string>
#include <string_view>

namespace ps {

// Length of the well-formed UTF-8 sequence at s[i] (no overlong forms, surrogates or code
// points above U+10FFFF), or 0 when s[i] does not start one.
size_t utf8_sequence_length(std::string_view s, size_t i);

// s as valid UTF-8: each byte of an invalid sequence becomes \xNN. With `controls`, control
// characters are escaped too (\n, \t, \xNN), so that text from a file cannot move a
// terminal's cursor or change its colours.
std::string printable(std::string_view s, bool controls);

}  // namespace ps
