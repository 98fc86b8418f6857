#pragma once
// A reasoning model's reply in two parts: its thinking (between <think> and </think>) and its
// answer, split as the text streams in. A tag may arrive split over pieces, so text that could
// start one is held back until the next piece (or the end) decides.
#include <memory>
#include <string>

#include "sampling/sampler.h"

namespace ps {

namespace grammar {
struct VocabPieces;
}

class ThinkingSplitter {
 public:
  // `thinking`: the reply starts inside the thinking block (the template's generation prompt
  // opened it).
  explicit ThinkingSplitter(bool thinking = false) : thinking_(thinking) {}
  struct Parts {
    std::string thinking, answer;
  };
  // The parts `piece` completes; `last`: the reply ends with it (nothing is held back).
  Parts feed(const std::string& piece, bool last);
  bool thinking() const { return thinking_; }

 private:
  bool thinking_;
  std::string pending_;
};

// A thinking budget, as the sampler's filter: once a reply has thought for `budget` tokens
// inside a <think> block, the tokens that follow are those that write "</think>" (then any):
// the model is made to stop thinking and answer. Budget 0 closes a block as soon as it opens.
class ThinkingBudget : public TokenFilter {
 public:
  ThinkingBudget(std::shared_ptr<const grammar::VocabPieces> vocab, int budget, bool thinking);
  bool allows(int32_t token) const override;
  void accept(int32_t token) override;
  bool closing() const { return !rest_.empty(); }

 private:
  std::shared_ptr<const grammar::VocabPieces> vocab_;
  int budget_;
  bool thinking_;
  int spent_ = 0;
  std::string tail_;  // the end of the text, where a tag may be forming
  std::string rest_;  // what is left to write of the closing tag while closing
  void close_if_spent();
};

}  // namespace ps
