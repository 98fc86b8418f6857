#include "engine/reply_reader.h"

#include <algorithm>

namespace ps {

ReplyReader::Parts ReplyReader::feed(const std::string& piece, bool last) {
  Parts out;
  if (o_.format == ToolFormat::gpt_oss && o_.split_reasoning) {
    read_harmony(piece, last, out);
  } else if (o_.split_reasoning) {
    ThinkingSplitter::Parts p = thinking_.feed(piece, last);
    out.reasoning = std::move(p.thinking);
    read_answer(p.answer, last, out);
  } else {
    read_answer(piece, last, out);
  }
  return out;
}

void ReplyReader::read_harmony(const std::string& text, bool last, Parts& out) {
  constexpr std::string_view kMessage = "<|message|>", kEnd = "<|end|>", kStart = "<|start|>";
  pending_ += text;
  const auto route = [&](std::string_view t) {
    switch (channel_) {
      case Channel::thinking:
        out.reasoning += t;
        break;
      case Channel::call:
        calls_ += t;
        break;
      default:
        out.content += t;
    }
  };
  for (;;) {
    if (channel_ == Channel::plain) {  // text outside the markup: the answer, as it comes
      route(pending_);
      pending_.clear();
      break;
    }
    if (channel_ == Channel::header) {
      // A header starts with a mark; text that does not is plain, as is a header never ended.
      const size_t a = pending_.find_first_not_of(" \t\r\n");
      if (a != std::string::npos && pending_[a] != '<') {
        channel_ = Channel::plain;
        continue;
      }
      const size_t at = pending_.find(kMessage);
      if (at == std::string::npos) {
        if (last) {
          channel_ = Channel::plain;
          continue;
        }
        break;
      }
      const std::string head = pending_.substr(0, at);
      if (head.find("<|channel|>") == std::string::npos) {
        channel_ = Channel::plain;
        continue;
      }
      const bool call = head.find("to=functions.") != std::string::npos;
      channel_ = call && o_.tools                                        ? Channel::call
                 : head.find("<|channel|>analysis") != std::string::npos ? Channel::thinking
                                                                         : Channel::answer;
      if (channel_ == Channel::call) calls_ += head + std::string(kMessage);
      pending_.erase(0, at + kMessage.size());
      continue;
    }
    // A message's body: up to <|end|> (or the next <|start|>, when a model leaves out the end).
    const size_t end = std::min(pending_.find(kEnd), pending_.find(kStart));
    if (end != std::string::npos) {
      route(std::string_view(pending_).substr(0, end));
      if (channel_ == Channel::call) calls_ += "\n";
      pending_.erase(0, pending_.compare(end, kEnd.size(), kEnd) == 0 ? end + kEnd.size() : end);
      channel_ = Channel::header;
      continue;
    }
    size_t keep = 0;
    if (!last)
      for (const std::string_view m : {kEnd, kStart})
        for (size_t k = std::min(m.size() - 1, pending_.size()); k > keep; --k)
          if (pending_.compare(pending_.size() - k, k, m, 0, k) == 0) {
            keep = k;
            break;
          }
    route(std::string_view(pending_).substr(0, pending_.size() - keep));
    pending_.erase(0, pending_.size() - keep);
    break;
  }
  if (last && !calls_.empty()) {
    ToolReply r = parse_tool_calls(ToolFormat::gpt_oss, calls_);
    if (r.parsed && !r.calls.empty())
      out.calls = std::move(r.calls);
    else
      out.content += calls_;
    calls_.clear();
  }
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
