// A streamed reply split into thinking and answer, whatever the pieces' boundaries.
#include "engine/thinking.h"

#include <gtest/gtest.h>

#include <random>

namespace ps {
namespace {

ThinkingSplitter::Parts split_in_pieces(const std::string& text, size_t piece, bool opened) {
  ThinkingSplitter s(opened);
  ThinkingSplitter::Parts all;
  for (size_t at = 0; at < text.size(); at += piece) {
    const auto p = s.feed(text.substr(at, piece), at + piece >= text.size());
    all.thinking += p.thinking;
    all.answer += p.answer;
  }
  return all;
}

TEST(ThinkingSplitter, TagsSplitAcrossPiecesOfEverySize) {
  const std::string reply = "<think>Paris is in France. <thin no</think>The capital is Paris <";
  for (size_t piece = 1; piece <= reply.size(); ++piece) {
    const auto p = split_in_pieces(reply, piece, false);
    EXPECT_EQ(p.thinking, "Paris is in France. <thin no") << "pieces of " << piece;
    EXPECT_EQ(p.answer, "The capital is Paris <") << "pieces of " << piece;
  }
}

TEST(ThinkingSplitter, AReplyThatStartsInsideTheBlock) {
  // The template's generation prompt ended in <think>: the model only closes it.
  const auto p = split_in_pieces("step one</think>answer", 3, true);
  EXPECT_EQ(p.thinking, "step one");
  EXPECT_EQ(p.answer, "answer");
  // A block never closed is all thinking; no tags at all is all answer.
  EXPECT_EQ(split_in_pieces("<think>still going", 4, false).thinking, "still going");
  EXPECT_EQ(split_in_pieces("a < b and c > d", 2, false).answer, "a < b and c > d");
}

TEST(ThinkingSplitter, HoldsBackOnlyWhatCouldStartATag) {
  ThinkingSplitter s;
  EXPECT_EQ(s.feed("x <th", false).answer, "x ");
  EXPECT_EQ(s.feed("e", false).answer, "<the");  // "<the" cannot begin "<think>"
  EXPECT_EQ(s.feed("<", false).answer, "");
  EXPECT_EQ(s.feed("", true).answer, "<");  // the end releases what was held
}

}  // namespace
}  // namespace ps
