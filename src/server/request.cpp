#include "server/request.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <type_traits>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace ps::server {

using json = nlohmann::json;

ApiError invalid(const std::string& msg) { return {400, "invalid_request_error", msg}; }

json parse_body(std::string_view text) {
  json body = json::parse(text, nullptr, false);
  if (body.is_discarded()) throw invalid("the request body is not valid JSON");
  if (!body.is_object()) throw invalid("the request body must be a JSON object");
  return body;
}

// Typed field readers: absent or null gives the default; a wrong type is a 400 naming it.
template <typename T>
T number(const json& b, const char* key, T dflt, double lo, double hi) {
  if (!b.contains(key) || b[key].is_null()) return dflt;
  const json& v = b[key];
  if (std::is_integral_v<T> ? !v.is_number_integer() : !v.is_number())
    throw invalid(
        fmt::format("'{}' must be {}", key, std::is_integral_v<T> ? "an integer" : "a number"));
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) throw invalid(fmt::format("'{}' must be in [{}, {}]", key, lo, hi));
  return v.get<T>();
}

bool boolean(const json& b, const char* key, bool dflt) {
  if (!b.contains(key) || b[key].is_null()) return dflt;
  if (!b[key].is_boolean()) throw invalid(fmt::format("'{}' must be a boolean", key));
  return b[key].get<bool>();
}

// content: a string, or an array of {"type": "text", "text": ...} parts.
std::string content_text(const json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return "";
  if (!c.is_array()) throw invalid(where + " must be a string or an array of text parts");
  std::string out;
  for (const json& part : c) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      throw invalid(where + ": each part must be an object with a 'type'");
    if (part["type"] != "text")
      throw invalid(fmt::format("{}: parts of type '{}' are not supported (text only)", where,
                                part["type"].get<std::string>()));
    if (!part.contains("text") || !part["text"].is_string())
      throw invalid(where + ": a text part needs a string 'text'");
    out += part["text"].get<std::string>();
  }
  return out;
}

namespace {

// The request's sampling, length and stop fields.
CompletionRequest read_common(const json& b, int32_t n_vocab) {
  if (b.contains("model") && !b["model"].is_null() && !b["model"].is_string())
    throw invalid("'model' must be a string");
  if (number<int64_t>(b, "n", 1, -1e18, 1e18) != 1)
    throw invalid("'n' must be 1: one choice per request");
  CompletionRequest r;
  SamplerParams& sp = r.sampling;
  sp.temp = number<float>(b, "temperature", sp.temp, 0, 100);
  sp.top_p = number<float>(b, "top_p", sp.top_p, 0, 1);
  sp.top_k = number<int32_t>(b, "top_k", sp.top_k, 0, 1 << 30);
  sp.min_p = number<float>(b, "min_p", sp.min_p, 0, 1);
  sp.presence_penalty = number<float>(b, "presence_penalty", 0, -2, 2);
  sp.frequency_penalty = number<float>(b, "frequency_penalty", 0, -2, 2);
  sp.repeat_penalty = number<float>(b, "repeat_penalty", sp.repeat_penalty, 0, 100);
  if (sp.repeat_penalty <= 0) throw invalid("'repeat_penalty' must be positive");
  const int64_t seed = number<int64_t>(b, "seed", -1, -9.2e18, 9.2e18);
  sp.seed = seed >= 0 ? uint64_t(seed) : std::random_device{}();
  int64_t max = number<int64_t>(b, "max_tokens", -1, 1, 1e9);
  max = number<int64_t>(b, "max_completion_tokens", max, 1, 1e9);
  r.max_tokens = int(max);
  if (b.contains("stop") && !b["stop"].is_null()) {
    const json& s = b["stop"];
    if (s.is_string())
      r.stop.push_back(s.get<std::string>());
    else if (s.is_array() && s.size() <= 16 &&
             std::all_of(s.begin(), s.end(), [](const json& x) { return x.is_string(); }))
      for (const json& x : s) r.stop.push_back(x.get<std::string>());
    else
      throw invalid("'stop' must be a string or an array of at most 16 strings");
  }
  try {
    Sampler check(sp, n_vocab);
  } catch (const UsageError& e) {
    throw invalid(e.what());
  }
  return r;
}

// Fields of OpenAI's API whose meaning polystack does not give yet: a request that relies on
// them is refused, naming the field, rather than answered as if they were absent.
void refuse_unsupported(const json& b) {
  const auto given = [&](const char* key) { return b.contains(key) && !b[key].is_null(); };
  if (given("tools") && !(b["tools"].is_array() && b["tools"].empty()))
    throw invalid("'tools' is not supported yet: replies are not parsed into tool calls");
  if (given("tool_choice") && b["tool_choice"] != "none")
    throw invalid("'tool_choice' is not supported yet: replies are not parsed into tool calls");
  if (given("functions")) throw invalid("'functions' is not supported yet");
}

// Constrained decoding: `grammar` (GBNF, as llama-server takes it) or `response_format`
// (OpenAI's: text, json_object, json_schema with its schema; llama-server's json_object with a
// `schema`). Null: the reply is free text.
std::shared_ptr<const grammar::Grammar> read_grammar(const json& b, std::string_view body) {
  const auto given = [&](const char* key) { return b.contains(key) && !b[key].is_null(); };
  std::string gbnf, what;
  if (given("grammar")) {
    if (!b["grammar"].is_string()) throw invalid("'grammar' must be a string (GBNF)");
    gbnf = b["grammar"].get<std::string>(), what = "'grammar'";
  }
  if (given("response_format")) {
    const json& f = b["response_format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
      throw invalid("'response_format' must be an object with a 'type'");
    const std::string type = f["type"].get<std::string>();
    if (type != "text" && !gbnf.empty())
      throw invalid("give 'grammar' or 'response_format', not both");
    // The schema parsed again keeping its key order: properties come out in the order given.
    const auto ordered = [&] { return nlohmann::ordered_json::parse(body)["response_format"]; };
    try {
      if (type == "json_object") {
        gbnf = f.contains("schema") && !f["schema"].is_null()
                   ? grammar::json_schema_to_gbnf(ordered()["schema"])
                   : grammar::json_object_gbnf();
        what = "'response_format'";
      } else if (type == "json_schema") {
        if (!f.contains("json_schema") || !f["json_schema"].is_object() ||
            !f["json_schema"].contains("schema"))
          throw invalid("'response_format' of type json_schema needs 'json_schema.schema'");
        gbnf = grammar::json_schema_to_gbnf(ordered()["json_schema"]["schema"]);
        what = "'response_format'";
      } else if (type != "text") {
        throw invalid(fmt::format(
            "'response_format' type '{}' is not one of text, json_object, json_schema", type));
      }
    } catch (const grammar::GrammarError& e) {
      throw invalid(fmt::format("'response_format': {}", e.what()));
    }
  }
  if (gbnf.empty()) return nullptr;
  try {
    return std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(gbnf));
  } catch (const grammar::GrammarError& e) {
    throw invalid(fmt::format("{}: {}", what, e.what()));
  }
}

// Chat: logprobs (a boolean) and top_logprobs (0 to 20, with logprobs). Completions: logprobs
// as the legacy API has it, the count of alternatives (0 to 5). -1: none asked for.
int read_logprobs(const json& b, bool chat) {
  const auto given = [&](const char* key) { return b.contains(key) && !b[key].is_null(); };
  if (!chat) {
    if (given("top_logprobs") && b["top_logprobs"] != 0)
      throw invalid("'top_logprobs' is for chat; completions take 'logprobs' N");
    if (!given("logprobs")) return -1;
    if (b["logprobs"].is_boolean()) return b["logprobs"].get<bool>() ? 0 : -1;
    if (!b["logprobs"].is_number_integer() || b["logprobs"].get<int64_t>() < 0 ||
        b["logprobs"].get<int64_t>() > 5)
      throw invalid("'logprobs' must be an integer in [0, 5] on completions");
    return b["logprobs"].get<int>();
  }
  if (given("logprobs") && !b["logprobs"].is_boolean())
    throw invalid("'logprobs' must be a boolean on chat completions");
  const bool on = given("logprobs") && b["logprobs"].get<bool>();
  if (!given("top_logprobs")) return on ? 0 : -1;
  if (!b["top_logprobs"].is_number_integer() || b["top_logprobs"].get<int64_t>() < 0 ||
      b["top_logprobs"].get<int64_t>() > 20)
    throw invalid("'top_logprobs' must be an integer in [0, 20]");
  const int n = b["top_logprobs"].get<int>();
  if (!on && n > 0) throw invalid("'top_logprobs' needs 'logprobs': true");
  return on ? n : -1;
}

void check_fits(const CompletionRequest& r, int n_ctx) {
  if (r.prompt.empty()) throw invalid("the prompt is empty");
  if (int64_t(r.prompt.size()) >= n_ctx)
    throw ApiError(
        400, "exceed_context_size_error",
        fmt::format("the prompt has {} tokens but a slot holds {} (-c)", r.prompt.size(), n_ctx),
        {{"n_prompt_tokens", r.prompt.size()}, {"n_ctx", n_ctx}});
}

// A prompt's tokens, refused before it is tokenized when its length alone says it cannot fit:
// work in proportion to what a slot can hold, not to what a client sends.
std::vector<int32_t> encode_bounded(const std::string& text, const Tokenizer& tok, int n_ctx) {
  if (const size_t least = tok.min_tokens(text.size()); least >= size_t(n_ctx))
    throw ApiError(400, "exceed_context_size_error",
                   fmt::format("the prompt has at least {} tokens ({} bytes) but a slot holds {} "
                               "(-c)",
                               least, text.size(), n_ctx),
                   {{"n_prompt_tokens", least}, {"n_ctx", n_ctx}});
  return tok.encode(text, true, true);
}

std::vector<int32_t> tokenize_prompt(const json& b, const Tokenizer& tok, int n_ctx) {
  if (!b.contains("prompt")) throw invalid("'prompt' is required");
  const json& p = b["prompt"];
  std::string text;
  if (p.is_string()) {
    text = p.get<std::string>();
  } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    text = p[0].get<std::string>();
  } else if (p.is_array() && !p.empty() &&
             std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_number_integer(); })) {
    std::vector<int32_t> ids;
    for (const json& x : p) {
      const int64_t id = x.get<int64_t>();
      if (id < 0 || id >= tok.n_vocab())
        throw invalid(fmt::format("token id {} is outside the vocabulary", id));
      ids.push_back(int32_t(id));
    }
    return ids;
  } else {
    throw invalid("'prompt' must be a string, an array of one string or an array of token ids");
  }
  return encode_bounded(text, tok, n_ctx);
}

}  // namespace

std::string render_chat(std::string_view body, const ChatSetup& chat) {
  using ojson = nlohmann::ordered_json;
  // Parsed again keeping key order: templates print tools and arguments in the order sent.
  const ojson b = ojson::parse(body, nullptr, false);
  if (b.is_discarded()) throw invalid("the request body is not valid JSON");
  if (!b.is_object()) throw invalid("the request body must be a JSON object");
  if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty())
    throw invalid("'messages' must be a non-empty array");
  ojson vars = ojson::object();
  ojson messages = ojson::array();
  for (size_t i = 0; i < b["messages"].size(); ++i) {
    ojson m = b["messages"][i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw invalid(where + " must be an object with a string 'role'");
    // The roles of OpenAI's API; the template decides what it makes of each.
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool" && role != "function")
      throw invalid(fmt::format(
          "{}: unknown role '{}' (system, developer, user, assistant, tool or function)", where,
          role));
    if (role == "developer") m["role"] = "system";
    if (m.contains("content") && !m["content"].is_null())
      m["content"] = content_text(json(m["content"]), where + ".content");
    messages.push_back(std::move(m));
  }
  vars["messages"] = std::move(messages);
  // As transformers' apply_chat_template: tools and documents are None when not sent.
  for (const char* key : {"tools", "documents"}) {
    vars[key] = nullptr;
    if (b.contains(key) && !b[key].is_null()) {
      if (!b[key].is_array()) throw invalid(fmt::format("'{}' must be an array", key));
      vars[key] = b[key];
    }
  }
  if (chat.enable_thinking) vars["enable_thinking"] = *chat.enable_thinking;
  if (b.contains("chat_template_kwargs") && !b["chat_template_kwargs"].is_null()) {
    const ojson& kw = b["chat_template_kwargs"];
    if (!kw.is_object()) throw invalid("'chat_template_kwargs' must be an object");
    for (auto it = kw.begin(); it != kw.end(); ++it) {
      if (it.key() == "messages")
        throw invalid("'chat_template_kwargs' may not replace 'messages'");
      vars[it.key()] = it.value();
    }
  }
  vars["add_generation_prompt"] = true;
  if (!chat.tmpl) throw ApiError(500, "server_error", "the server has no chat template");
  try {
    return chat.tmpl->render(std::move(vars));
  } catch (const TemplateError& e) {
    throw invalid(
        e.raised()
            ? fmt::format("the chat template refused the conversation: {}", e.message())
            : fmt::format("the chat template failed on this conversation: {}", jinja::describe(e)));
  }
}

CompletionBody parse_completion(std::string_view body, bool chat, const Tokenizer& tok,
                                const ChatSetup& setup, int n_ctx) {
  const json b = parse_body(body);
  refuse_unsupported(b);
  CompletionBody out;
  out.request = read_common(b, tok.n_vocab());
  out.request.grammar = read_grammar(b, body);
  out.request.logprobs = read_logprobs(b, chat);
  // The rendered text holds the template's control tokens as text: parsed as special tokens.
  if (chat) {
    const std::string text = render_chat(body, setup);
    out.request.prompt = encode_bounded(text, tok, n_ctx);
    const std::string format =
        b.contains("reasoning_format") && !b["reasoning_format"].is_null()
            ? (b["reasoning_format"].is_string() ? b["reasoning_format"].get<std::string>()
                                                 : std::string("?"))
            : "auto";
    if (format != "auto" && format != "deepseek" && format != "none")
      throw invalid("'reasoning_format' must be one of auto, deepseek, none");
    out.split_reasoning = format != "none";
    const size_t end = text.find_last_not_of(" \t\r\n");
    out.starts_thinking =
        end != std::string::npos && end >= 6 && text.compare(end - 6, 7, "<think>") == 0;
  } else {
    out.request.prompt = tokenize_prompt(b, tok, n_ctx);
  }
  check_fits(out.request, n_ctx);
  out.stream = boolean(b, "stream", false);
  if (b.contains("stream_options") && !b["stream_options"].is_null()) {
    if (!b["stream_options"].is_object()) throw invalid("'stream_options' must be an object");
    out.include_usage = boolean(b["stream_options"], "include_usage", false);
  }
  return out;
}

std::vector<int32_t> parse_tokenize(std::string_view body, const Tokenizer& tok) {
  const json b = parse_body(body);
  if (!b.contains("content") || !b["content"].is_string())
    throw invalid("'content' must be a string");
  // Its own bound, as it has no context to measure against: a few seconds of tokenizing.
  constexpr size_t kMaxTokenizeBytes = size_t(4) << 20;
  if (b["content"].get_ref<const std::string&>().size() > kMaxTokenizeBytes)
    throw invalid(fmt::format("'content' has {} bytes; /tokenize takes at most {} (4 MiB)",
                              b["content"].get_ref<const std::string&>().size(),
                              kMaxTokenizeBytes));
  const bool special = boolean(b, "add_special", false);
  return tok.encode(b["content"].get<std::string>(), special, true);
}

std::vector<int32_t> parse_detokenize(std::string_view body, const Tokenizer& tok) {
  const json b = parse_body(body);
  if (!b.contains("tokens") || !b["tokens"].is_array())
    throw invalid("'tokens' must be an array of token ids");
  std::vector<int32_t> ids;
  for (const json& x : b["tokens"]) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tok.n_vocab())
      throw invalid("'tokens' must hold token ids of this vocabulary");
    ids.push_back(x.get<int32_t>());
  }
  return ids;
}

}  // namespace ps::server
