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
#include "engine/tool_calls.h"
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

// A chat request's tools: those offered (OpenAI's `tools`), whether and how the reply may call
// them (`tool_choice`), and whether it may call several (`parallel_tool_calls`).
struct ToolUse {
  enum class Choice { none, automatic, required, named };
  std::vector<ToolSpec> tools;
  Choice choice = Choice::automatic;
  bool parallel = true;
  // Whether the reply is read for calls: tools offered and not refused.
  bool active() const { return !tools.empty() && choice != Choice::none; }
};

struct CompletionBody {
  CompletionRequest request;  // prompt, sampling, length and stop strings
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Chat: the reply's thinking (<think>...</think>) goes to reasoning_content, apart from the
  // content (reasoning_format auto, the default, or deepseek; "none" leaves it inline), and
  // whether the rendered prompt already opened the block.
  bool split_reasoning = false;
  bool starts_thinking = false;
  ToolUse tools;  // chat: the tools offered (a call forced by the request's grammar)
  // Chat: the request set thinking_budget_tokens (request.thinking_budget; -1 unbounded),
  // else the server's default applies.
  bool budget_given = false;
};

// How chat requests are rendered: the model's chat template, and the server's default for
// templates that take enable_thinking (--reasoning; unset: the template's own default).
// The syntax of tool calls the template teaches (ToolFormat::none: the generic JSON form,
// taught by a system message the server adds).
struct ChatSetup {
  const jinja::ChatTemplate* tmpl = nullptr;
  std::optional<bool> enable_thinking;
  ToolFormat tool_format = ToolFormat::none;
};

// A chat body's prompt text: its messages (roles and text content checked; text parts joined,
// "developer" read as "system"), tools, and chat_template_kwargs (enable_thinking and any other
// variable the template reads) rendered with the template. A template that raises, or fails
// on the request's data, is a 400 naming the template's message. Tools (checked as
// read_tools does) are left out with tool_choice "none"; the arguments of earlier calls reach
// the template as objects. With the generic form, a system message lists the tools, and
// earlier calls and their results are written as that form's JSON (unless the template names
// the 'tool' role: it has its own place for them).
std::string render_chat(std::string_view body, const ChatSetup& chat);

// The body of POST /v1/completions (chat false) or /v1/chat/completions (chat true: rendered
// with render_chat). n_ctx: the tokens a slot holds; a prompt that does not fit is a 400
// exceed_context_size_error.
CompletionBody parse_completion(std::string_view body, bool chat, const Tokenizer& tok,
                                const ChatSetup& setup, int n_ctx);

// POST /v1/embeddings (and /embeddings): `input` as a string, an array of strings, an array of
// token ids or an array of such arrays (at most 2048 inputs), each tokenized as llama.cpp does
// (BOS and EOS as the model asks, special tokens parsed) and checked against n_ctx;
// `encoding_format` float or base64; `dimensions` only as the model's own n_embd.
struct EmbeddingBody {
  std::vector<std::vector<int32_t>> inputs;
  bool base64 = false;
};
EmbeddingBody parse_embeddings(std::string_view body, const Tokenizer& tok, int n_ctx,
                               int64_t n_embd);

// Floats as OpenAI's base64 encoding_format: their little-endian bytes in base64.
std::string base64_floats(const std::vector<float>& v);

// POST /tokenize: {content, add_special} -> the ids.
std::vector<int32_t> parse_tokenize(std::string_view body, const Tokenizer& tok);
// POST /detokenize: {tokens} -> the ids, each checked against the vocabulary.
std::vector<int32_t> parse_detokenize(std::string_view body, const Tokenizer& tok);

}  // namespace ps::server
