#include "core/text.h"

#include <gtest/gtest.h>

#include <random>

namespace ps {
namespace {

TEST(Text, ValidUtf8PassesThrough) {
  const std::string s = "plain, h\xc3\xa9llo, \xe2\x82\xac, \xf0\x9f\x98\x80";
  EXPECT_EQ(printable(s, false), s);
  EXPECT_EQ(printable(s, true), s);
}

TEST(Text, InvalidSequencesBecomeEscapes) {
  EXPECT_EQ(printable("\xff\xfe\xfd", false), "\\xff\\xfe\\xfd");
  EXPECT_EQ(printable("ok \xe2\x82", false), "ok \\xe2\\x82");              // cut at the end
  EXPECT_EQ(printable("\xc0\xaf", false), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80", false), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80", false), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(printable("a\x80z", false), "a\\x80z");                         // a lone continuation
}

TEST(Text, ControlsAreEscapedOnlyForTheTerminal) {
  const std::string s = "\x1b[31mred\x1b[0m\n\tx\x7f";
  EXPECT_EQ(printable(s, false), s);
  EXPECT_EQ(printable(s, true), "\\x1b[31mred\\x1b[0m\\n\\tx\\x7f");
}

TEST(Text, RandomBytesAlwaysGiveValidUtf8) {
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string s(size_t(rng() % 24), '\0');
    for (char& c : s) c = char(rng());
    const std::string out = printable(s, true);
    for (size_t i = 0; i < out.size();) {
      const size_t n = utf8_sequence_length(out, i);
      ASSERT_GT(n, 0u) << "invalid UTF-8 left at byte " << i;
      ASSERT_FALSE(n == 1 && (uint8_t(out[i]) < 0x20 || out[i] == 0x7f));
      i += n;
    }
  }
}

}  // namespace
}  // namespace ps
