#include "tokenizer/unicode_text.h"

#include <array>

namespace ps::unicode {
namespace {

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

struct ByteMap {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 512> from_unicode;  // every mapped code point is below 512

  ByteMap() {
    from_unicode.fill(-1);
    std::array<bool, 256> printable{};
    for (int b = 0x21; b <= 0x7E; ++b) printable[size_t(b)] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) printable[size_t(b)] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) printable[size_t(b)] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = printable[size_t(b)] ? uint32_t(b) : next++;
      append_utf8(to_unicode[size_t(b)], cp);
      from_unicode[cp] = int16_t(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = s[i];
    if (b0 < 0x80) {
      cps.push_back(b0);
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && (b0 & 0x40) && i + 1 < n && is_continuation(s[i + 1])) {
      cps.push_back(uint32_t(b0 & 0x1F) << 6 | (s[i + 1] & 0x3F));
      i += 2;
    } else if ((b0 & 0xF0) == 0xE0 && i + 2 < n && is_continuation(s[i + 1]) &&
               is_continuation(s[i + 2])) {
      cps.push_back(uint32_t(b0 & 0x0F) << 12 | uint32_t(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F));
      i += 3;
    } else if ((b0 & 0xF8) == 0xF0 && i + 3 < n && is_continuation(s[i + 1]) &&
               is_continuation(s[i + 2]) && is_continuation(s[i + 3])) {
      cps.push_back(uint32_t(b0 & 0x07) << 18 | uint32_t(s[i + 1] & 0x3F) << 12 |
                    uint32_t(s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F));
      i += 4;
    } else {
      cps.push_back(kReplacementChar);
      i += 1;
    }
  }
  return cps;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp <= 0x7F) {
    out.push_back(char(cp));
  } else if (cp <= 0x7FF) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp <= 0xFFFF) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp <= 0x10FFFF) {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    append_utf8(out, kReplacementChar);
  }
}

const std::string& byte_to_unicode(uint8_t byte) { return byte_map().to_unicode[byte]; }

int unicode_to_byte(uint32_t cp) {
  return cp < byte_map().from_unicode.size() ? byte_map().from_unicode[cp] : -1;
}

bool is_white_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace ps::unicode
