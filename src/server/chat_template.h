#pragma once
// Chat prompts from built-in templates for the families polystack runs, chosen from the
// model's `tokenizer.chat_template` by its markers (a Jinja engine will replace the
// detection): Gemma's <start_of_turn> turns (also for gemma3 files without a template), Llama
// 3's headers, and ChatML as the fallback.
#include <string>
#include <string_view>
#include <vector>

namespace ps::server {

struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};

enum class ChatFormat { Gemma, Llama3, ChatML };

// The format for a model: from its template's markers, else gemma for gemma3, else ChatML.
ChatFormat detect_chat_format(std::string_view chat_template, std::string_view architecture);
const char* chat_format_name(ChatFormat f);

// The prompt text for `messages` followed by the opening of the assistant's turn. It holds no
// BOS: the tokenizer adds it. Control tokens in it are written as their text, so the prompt
// is encoded with special tokens parsed. UsageError for a role the format has no turn for.
std::string format_chat(ChatFormat f, const std::vector<ChatMessage>& messages);

// The text that ends an assistant turn in the format ("<end_of_turn>"): a stop string besides
// the end-of-generation tokens.
std::string chat_turn_end(ChatFormat f);

}  // namespace ps::server
