#pragma once
// Reading the bodies of the server's requests: JSON, field types and ranges, prompts tokenized
// or chat messages formatted. Pure functions of the body (and the model's tokenizer), so that
// they are tested and fuzzed without a running server. Every client error is an ApiError with
// its HTTP status and OpenAI error type; nothing else escapes for any body.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "template/chat_template.h"

namespace ps {
class Tokenizer;
}

namespace ps::server {

// A client error: the HTTP status, OpenAI's error type and the message (extra: more fields of
// the error object).
struct ApiError : std::runtime_error {
  int status;
  std::string type;
  nlohmann::json extra;
  ApiError(int s, std::string t, const std::string& msg,
           nlohmann::json x = nlohmann::json::object())
      : std::runtime_error(msg), status(s), type(std::move(t)), extra(std::move(x)) {}
};

// A 400 invalid_request_error.
ApiError invalid(const std::string& msg);

// The body as a JSON object.
nlohmann::json parse_body(std::string_view text);

// An optional boolean field: absent or null gives `dflt`.
bool boolean(const nlohmann::json& b, const char* key, bool dflt);

struct CompletionBody {
  CompletionRequest request;  // prompt, sampling, length and stop strings
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Chat: the reply's thinking (<think>...</think>) goes to reasoning_content, apart from the
  // content (reasoning_format auto, the default, or deepseek; "none" leaves it inline), and
  // whether the rendered prompt already opened the block.
  bool split_reasoning = false;
  bool starts_thinking = false;
};

// How chat requests are rendered: the model's chat template, and the server's default for
// templates that take enable_thinking (--reasoning; unset: the template's own default).
struct ChatSetup {
  const jinja::ChatTemplate* tmpl = nullptr;
  std::optional<bool> enable_thinking;
};

// A chat body's prompt text: its messages (roles and text content checked; text parts joined,
// "developer" read as "system"), tools, and chat_template_kwargs (enable_thinking and any other
// variable the template reads) rendered with the template. A template that raises, or fails
// on the request's data, is a 400 naming the template's message.
std::string render_chat(std::string_view body, const ChatSetup& chat);

// The body of POST /v1/completions (chat false) or /v1/chat/completions (chat true: rendered
// with render_chat). n_ctx: the tokens a slot holds; a prompt that does not fit is a 400
// exceed_context_size_error.
CompletionBody parse_completion(std::string_view body, bool chat, const Tokenizer& tok,
                                const ChatSetup& setup, int n_ctx);

// POST /tokenize: {content, add_special} -> the ids.
std::vector<int32_t> parse_tokenize(std::string_view body, const Tokenizer& tok);
// POST /detokenize: {tokens} -> the ids, each checked against the vocabulary.
std::vector<int32_t> parse_detokenize(std::string_view body, const Tokenizer& tok);

}  // namespace ps::server
