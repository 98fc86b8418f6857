#include "engine/text_stream.h"

#include <algorithm>

namespace ps {
namespace {

// Bytes of the UTF-8 character a lead byte starts (1 for a stray continuation byte, so
// invalid input still moves on).
size_t utf8_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace

std::string TextStream::add(const std::string& bytes) {
  if (stopped_) return {};
  partial_ += bytes;
  // The whole characters at the front of partial_ move to held_.
  size_t at = 0;
  while (at < partial_.size()) {
    const size_t n = utf8_length(static_cast<unsigned char>(partial_[at]));
    if (at + n > partial_.size()) break;
    at += n;
  }
  held_ += partial_.substr(0, at);
  partial_.erase(0, at);
  size_t cut = std::string::npos;
  for (const std::string& s : stop_)
    if (!s.empty()) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    partial_.clear();
    return out;
  }
  // Keep the longest tail that begins a stop string (on a character boundary).
  size_t keep = 0;
  for (const std::string& s : stop_)
    for (size_t n = std::min(s.size() - (s.empty() ? 0 : 1), held_.size()); n > keep; --n)
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  while (keep > 0 && keep < held_.size() &&
         (static_cast<unsigned char>(held_[held_.size() - keep]) & 0xC0) == 0x80)
    ++keep;
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TextStream::finish() {
  if (stopped_) return {};
  std::string out = held_ + partial_;
  held_.clear();
  partial_.clear();
  return out;
}

}  // namespace ps
