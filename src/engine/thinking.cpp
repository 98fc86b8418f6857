#include "engine/thinking.h"

#include <algorithm>

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

}  // namespace ps
