#include "server/chat_template.h"

#include <fmt/format.h>

#include "core/error.h"

namespace ps::server {

ChatFormat detect_chat_format(std::string_view chat_template, std::string_view architecture) {
  if (chat_template.find("<start_of_turn>") != std::string_view::npos) return ChatFormat::Gemma;
  if (chat_template.find("<|start_header_id|>") != std::string_view::npos)
    return ChatFormat::Llama3;
  if (chat_template.find("<|im_start|>") != std::string_view::npos) return ChatFormat::ChatML;
  if (chat_template.empty() && architecture.starts_with("gemma")) return ChatFormat::Gemma;
  return ChatFormat::ChatML;
}

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::Gemma:
      return "gemma";
    case ChatFormat::Llama3:
      return "llama3";
    case ChatFormat::ChatML:
      return "chatml";
  }
  return "?";
}

std::string chat_turn_end(ChatFormat f) {
  switch (f) {
    case ChatFormat::Gemma:
      return "<end_of_turn>";
    case ChatFormat::Llama3:
      return "<|eot_id|>";
    case ChatFormat::ChatML:
      return "<|im_end|>";
  }
  return {};
}

std::string format_chat(ChatFormat f, const std::vector<ChatMessage>& messages) {
  for (const ChatMessage& m : messages)
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      throw UsageError(fmt::format("unknown role '{}' (system, user or assistant)", m.role));
  std::string out;
  switch (f) {
    case ChatFormat::Gemma: {
      // Gemma has no system turn: its text opens the first user turn, as Gemma's own template
      // does.
      std::string system;
      bool first_user = true;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          system += (system.empty() ? "" : "\n\n") + m.content;
          continue;
        }
        std::string content = m.content;
        if (m.role == "user" && first_user && !system.empty()) content = system + "\n\n" + content;
        if (m.role == "user") first_user = false;
        out += fmt::format("<start_of_turn>{}\n{}<end_of_turn>\n",
                           m.role == "assistant" ? "model" : "user", content);
      }
      if (first_user && !system.empty())
        out += fmt::format("<start_of_turn>user\n{}<end_of_turn>\n", system);
      out += "<start_of_turn>model\n";
      return out;
    }
    case ChatFormat::Llama3:
      for (const ChatMessage& m : messages)
        out += fmt::format("<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>", m.role,
                           m.content);
      return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatFormat::ChatML:
      for (const ChatMessage& m : messages)
        out += fmt::format("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content);
      return out + "<|im_start|>assistant\n";
  }
  return out;
}

}  // namespace ps::server
