#include "engine/thinking.h"

#include <algorithm>

#include "grammar/token_filter.h"

namespace ps {

ThinkingSplitter::Parts ThinkingSplitter::feed(const std::string& piece, bool last) {
  pending_ += piece;
  Parts out;
  for (;;) {
    const std::string tag = thinking_ ? "</think>" : "<think>";
    const size_t at = pending_.find(tag);
    if (at != std::string::npos) {
      (thinking_ ? out.thinking : out.answer) += pending_.substr(0, at);
      pending_.erase(0, at + tag.size());
      thinking_ = !thinking_;
      continue;
    }
    // Hold back the longest end of the text that begins the tag.
    size_t keep = 0;
    if (!last)
      for (size_t k = std::min(tag.size() - 1, pending_.size()); k > 0; --k)
        if (pending_.compare(pending_.size() - k, k, tag, 0, k) == 0) {
          keep = k;
          break;
        }
    (thinking_ ? out.thinking : out.answer) += pending_.substr(0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    return out;
  }
}

ThinkingBudget::ThinkingBudget(std::shared_ptr<const grammar::VocabPieces> vocab, int budget,
                               bool thinking)
    : vocab_(std::move(vocab)), budget_(budget), thinking_(thinking) {
  close_if_spent();
}

void ThinkingBudget::close_if_spent() {
  if (thinking_ && rest_.empty() && spent_ >= budget_) rest_ = "</think>";
}

bool ThinkingBudget::allows(int32_t token) const {
  if (rest_.empty()) return true;
  if (token < 0 || size_t(token) >= vocab_->pieces.size() || vocab_->end[size_t(token)])
    return false;
  // A piece that writes the start of what is left (a piece that would run past it could carry
  // more thinking with it).
  const std::string& piece = vocab_->pieces[size_t(token)];
  return !piece.empty() && rest_.compare(0, piece.size(), piece) == 0;
}

void ThinkingBudget::accept(int32_t token) {
  if (token < 0 || size_t(token) >= vocab_->pieces.size()) return;
  const std::string& piece = vocab_->pieces[size_t(token)];
  if (!rest_.empty()) {
    rest_.erase(0, std::min(piece.size(), rest_.size()));
    if (rest_.empty()) thinking_ = false, tail_.clear();
    return;
  }
  tail_ += piece;
  const std::string tag = thinking_ ? "</think>" : "<think>";
  if (const size_t at = tail_.find(tag); at != std::string::npos) {
    thinking_ = !thinking_;
    spent_ = 0;
    tail_.erase(0, at + tag.size());
  } else if (thinking_) {
    ++spent_;
  }
  if (tail_.size() > 16) tail_.erase(0, tail_.size() - 16);
  close_if_spent();
}

}  // namespace ps
