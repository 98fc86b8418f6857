// A streamed reply split into thinking and answer, whatever the pieces' boundaries.
#include "engine/thinking.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>

#include "grammar/token_filter.h"

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

// A vocabulary of pieces, and a "model" that takes the first token of its liking the filter
// allows: the text it writes under a thinking budget.
struct BudgetRun {
  std::shared_ptr<grammar::VocabPieces> vocab = std::make_shared<grammar::VocabPieces>();
  BudgetRun() {
    for (const char* p : {"<think>", "</think>", "a", "b", "</", "think>", "<", "/", "t", "h", "i",
                          "n", "k", ">", "x</think>", ""}) {
      vocab->pieces.push_back(p);
      vocab->end.push_back(false);
    }
    vocab->end.back() = true;  // the last: end of text
  }
  int32_t id(const std::string& piece) const {
    return int32_t(std::find(vocab->pieces.begin(), vocab->pieces.end(), piece) -
                   vocab->pieces.begin());
  }
  // `liking`: the model's order of preference.
  std::string write(ThinkingBudget& f, const std::vector<std::string>& liking, int n) {
    std::string out;
    for (int step = 0; step < n; ++step) {
      int32_t pick = -1;
      for (const std::string& p : liking)
        if (f.allows(id(p))) {
          pick = id(p);
          break;
        }
      EXPECT_GE(pick, 0) << "nothing allowed after " << out;
      if (pick < 0) break;
      f.accept(pick);
      out += vocab->pieces[size_t(pick)] + "|";
    }
    return out;
  }
};

TEST(ThinkingBudget, ClosesTheBlockAfterBudgetTokens) {
  BudgetRun r;
  ThinkingBudget opened(r.vocab, 3, true);
  // The model would think forever ("a"); after 3 tokens the closing tag is written, from the
  // pieces it likes best that begin it, then it answers.
  EXPECT_EQ(r.write(opened, {"a", "x</think>", "</", "think>", "</think>", "b"}, 7),
            "a|a|a|</|think>|a|a|");
  ThinkingBudget closed_first(r.vocab, 3, false);
  EXPECT_EQ(r.write(closed_first, {"<think>", "a", "</think>"}, 1), "<think>|");
  EXPECT_EQ(r.write(closed_first, {"a", "</think>"}, 5), "a|a|a|</think>|a|");
  // Thinking closed by the model itself within the budget is left alone, and a new block
  // gets a budget of its own.
  ThinkingBudget own(r.vocab, 3, true);
  EXPECT_EQ(r.write(own, {"a"}, 1), "a|");
  EXPECT_EQ(r.write(own, {"</think>"}, 1), "</think>|");
  EXPECT_FALSE(own.closing());
  EXPECT_EQ(r.write(own, {"<think>"}, 1), "<think>|");
  EXPECT_EQ(r.write(own, {"b", "<", "/", "t", "h", "i", "n", "k", ">"}, 12),
            "b|b|b|<|/|t|h|i|n|k|>|b|");
}

TEST(ThinkingBudget, ZeroClosesAtOnceAndEndIsHeldOff) {
  BudgetRun r;
  ThinkingBudget f(r.vocab, 0, true);
  EXPECT_TRUE(f.closing());
  EXPECT_FALSE(f.allows(r.id(""))) << "no end of text inside the closing tag";
  EXPECT_FALSE(f.allows(r.id("a")));
  EXPECT_TRUE(f.allows(r.id("</think>")));
  EXPECT_FALSE(f.allows(r.id("x</think>")));
  EXPECT_EQ(r.write(f, {"a", "</think>"}, 2), "</think>|a|");
  EXPECT_TRUE(f.allows(r.id("")));
}

}  // namespace
}  // namespace ps
