#pragma once
// A reasoning model's reply in two parts: its thinking (between <think> and </think>) and its
// answer, split as the text streams in. A tag may arrive split over pieces, so text that could
// start one is held back until the next piece (or the end) decides.
#include <string>

namespace ps {

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

}  // namespace ps
