#include "engine/reply_reader.h"

#include <algorithm>

namespace ps {

ReplyReader::Parts ReplyReader::feed(const std::string& piece, bool last) {
  Parts out;
  if (o_.split_reasoning) {
    ThinkingSplitter::Parts p = thinking_.feed(piece, last);
    out.reasoning = std::move(p.thinking);
    read_answer(p.answer, last, out);
  } else {
    read_answer(piece, last, out);
  }
  return out;
}

void ReplyReader::read_answer(const std::string& text, bool last, Parts& out) {
  if (!o_.tools) {
    out.content = text;
    return;
  }
  constexpr const char* kSpace = " \t\r\n";
  if (!holding_) {
    pending_ += text;
    const ToolOpeners op = tool_call_openers(o_.format);
    size_t from = std::string::npos;  // where the held text begins
    if (op.everything) {
      from = 0;
    } else if (op.json_at_start && !content_sent_) {
      // A reply that is a JSON object is read as a whole; until its first non-space byte
      // comes, nothing can tell.
      const size_t a = pending_.find_first_not_of(kSpace);
      if (a != std::string::npos && pending_[a] == '{') from = 0;
      if (a == std::string::npos && !last) return;
    }
    if (from == std::string::npos)
      for (const std::string& m : op.markers) from = std::min(from, pending_.find(m));
    if (from != std::string::npos) {
      out.content += pending_.substr(0, from);
      held_ = pending_.substr(from);
      pending_.clear();
      holding_ = true;
    } else {
      // Hold back the longest end of the text that begins a mark.
      size_t keep = 0;
      if (!last)
        for (const std::string& m : op.markers)
          for (size_t k = std::min(m.size() - 1, pending_.size()); k > keep; --k)
            if (pending_.compare(pending_.size() - k, k, m, 0, k) == 0) {
              keep = k;
              break;
            }
      out.content += pending_.substr(0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
    }
  } else {
    held_ += text;
  }
  if (out.content.find_first_not_of(kSpace) != std::string::npos) content_sent_ = true;
  if (last && holding_) {
    ToolReply r = parse_tool_calls(o_.format, held_);
    out.content += r.content;  // the text around the calls, or all of it when none parse
    out.calls = std::move(r.calls);
    held_.clear();
    holding_ = false;
  }
}

}  // namespace ps
