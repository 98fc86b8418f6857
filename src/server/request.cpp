#include "server/request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
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

// The legacy form of tools, which OpenAI's API replaced with `tools`: refused, naming it.
void refuse_unsupported(const json& b) {
  for (const char* key : {"functions", "function_call"})
    if (b.contains(key) && !b[key].is_null())
      throw invalid(
          fmt::format("'{}' is the deprecated form of tools: send 'tools' and "
                      "'tool_choice'",
                      key));
}

using ojson = nlohmann::ordered_json;

// tools, tool_choice, parallel_tool_calls. Read from the body parsed keeping key order, so
// that parameters' properties are asked for (and printed) in the order given.
ToolUse read_tools(const ojson& b) {
  const auto given = [&](const char* key) { return b.contains(key) && !b[key].is_null(); };
  ToolUse u;
  if (given("tools")) {
    if (!b["tools"].is_array()) throw invalid("'tools' must be an array");
    if (b["tools"].size() > 128) throw invalid("'tools' holds at most 128 tools");
    for (size_t i = 0; i < b["tools"].size(); ++i) {
      const ojson& t = b["tools"][i];
      const std::string where = fmt::format("tools[{}]", i);
      if (!t.is_object() || !t.contains("type") || !t["type"].is_string())
        throw invalid(where + " must be an object with a 'type'");
      if (t["type"] != "function")
        throw invalid(fmt::format("{}: type '{}' is not supported (function only)", where,
                                  t["type"].get<std::string>()));
      if (!t.contains("function") || !t["function"].is_object())
        throw invalid(where + ": 'function' must be an object");
      const ojson& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string())
        throw invalid(where + ".function.name must be a string");
      ToolSpec spec;
      spec.name = f["name"].get<std::string>();
      // OpenAI's rule for names: what every family's call syntax can carry.
      if (spec.name.empty() || spec.name.size() > 64 ||
          !std::all_of(spec.name.begin(), spec.name.end(), [](char c) {
            return std::isalnum(uint8_t(c)) || c == '_' || c == '-' || c == '.';
          }))
        throw invalid(
            fmt::format("{}.function.name '{}' must be 1 to 64 letters, digits, '_', '-' or '.'",
                        where, spec.name));
      for (const ToolSpec& other : u.tools)
        if (other.name == spec.name)
          throw invalid(fmt::format("{}: a second tool named '{}'", where, spec.name));
      if (f.contains("description") && !f["description"].is_null()) {
        if (!f["description"].is_string())
          throw invalid(where + ".function.description must be a string");
        spec.description = f["description"].get<std::string>();
      }
      if (f.contains("parameters") && !f["parameters"].is_null()) {
        if (!f["parameters"].is_object())
          throw invalid(where + ".function.parameters must be an object (a JSON Schema)");
        spec.parameters = f["parameters"];
      }
      u.tools.push_back(std::move(spec));
    }
  }
  if (given("tool_choice")) {
    const ojson& c = b["tool_choice"];
    std::string name;
    if (c == "none") {
      u.choice = ToolUse::Choice::none;
    } else if (c == "auto") {
      u.choice = ToolUse::Choice::automatic;
    } else if (c == "required") {
      u.choice = ToolUse::Choice::required;
    } else if (c.is_object() && c.contains("type") && c["type"] == "function" &&
               c.contains("function") && c["function"].is_object() &&
               c["function"].contains("name") && c["function"]["name"].is_string()) {
      u.choice = ToolUse::Choice::named;
      name = c["function"]["name"].get<std::string>();
    } else {
      throw invalid(
          "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
          "\"function\", \"function\": {\"name\": NAME}}");
    }
    if ((u.choice == ToolUse::Choice::required || u.choice == ToolUse::Choice::named) &&
        u.tools.empty())
      throw invalid("'tool_choice' asks for a call but 'tools' offers none");
    if (u.choice == ToolUse::Choice::named) {
      const auto it = std::find_if(u.tools.begin(), u.tools.end(),
                                   [&](const ToolSpec& t) { return t.name == name; });
      if (it == u.tools.end())
        throw invalid(fmt::format("'tool_choice' names '{}', which is not in 'tools'", name));
      u.tools = {*it};
    }
  }
  if (given("parallel_tool_calls")) {
    if (!b["parallel_tool_calls"].is_boolean())
      throw invalid("'parallel_tool_calls' must be a boolean");
    u.parallel = b["parallel_tool_calls"].get<bool>();
  }
  return u;
}

// Constrained decoding: `grammar` (GBNF, as llama-server takes it) or `response_format`
// (OpenAI's: text, json_object, json_schema with its schema; llama-server's json_object with a
// `schema`). Null: the reply is free text.
std::shared_ptr<const grammar::Grammar> read_grammar(const json& b, const ojson& ob) {
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
    // The schema as sent, in its key order: properties come out in the order given.
    const auto ordered = [&]() -> const ojson& { return ob["response_format"]; };
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

namespace {

// A call's arguments as the templates take them: an object (OpenAI sends them as JSON text).
ojson arguments_object(const ojson& a) {
  if (a.is_string()) {
    ojson j = ojson::parse(a.get<std::string>(), nullptr, false);
    if (!j.is_discarded() && j.is_object()) return j;
  }
  return a;
}

// An assistant message's tool_calls, checked, their arguments made objects.
ojson read_tool_calls(const ojson& calls, const std::string& where) {
  if (!calls.is_array()) throw invalid(where + ".tool_calls must be an array");
  ojson out = calls;
  for (size_t j = 0; j < out.size(); ++j) {
    ojson& c = out[j];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].contains("name") || !c["function"]["name"].is_string())
      throw invalid(
          fmt::format("{}.tool_calls[{}] must be an object with function.name", where, j));
    if (c["function"].contains("arguments"))
      c["function"]["arguments"] = arguments_object(c["function"]["arguments"]);
    else
      c["function"]["arguments"] = ojson::object();
  }
  return out;
}

// The generic form's history: calls written as the JSON the model is asked for, results as a
// user message, for templates that have no place for either.
void write_generic(ojson& m) {
  if (m["role"] == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null()) {
    ojson calls = ojson::array();
    for (const ojson& c : m["tool_calls"])
      calls.push_back({{"name", c["function"]["name"]}, {"arguments", c["function"]["arguments"]}});
    m["content"] = ojson({{"tool_calls", calls}}).dump();
    m.erase("tool_calls");
  } else if (m["role"] == "tool" || m["role"] == "function") {
    ojson response = ojson::object();
    for (const char* key : {"tool_call_id", "name"})
      if (m.contains(key) && m[key].is_string()) response[key] = m[key];
    response["content"] = m.contains("content") ? m["content"] : ojson("");
    m = {{"role", "user"}, {"content", ojson({{"tool_response", response}}).dump()}};
  }
}

struct Rendered {
  std::string text;
  ToolUse tools;
};

Rendered render(const ojson& b, const ChatSetup& chat) {
  if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty())
    throw invalid("'messages' must be a non-empty array");
  Rendered out;
  out.tools = read_tools(b);
  const bool generic = chat.tool_format == ToolFormat::none;
  // Earlier calls and results are rewritten in the generic form only for templates that have
  // no place of their own for tool messages (whose source never names the role).
  const std::string_view src = chat.tmpl ? std::string_view(chat.tmpl->choice().source) : "";
  const bool rewrite = generic && src.find("'tool'") == std::string_view::npos &&
                       src.find("\"tool\"") == std::string_view::npos;
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
    if (role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null())
      m["tool_calls"] = read_tool_calls(m["tool_calls"], where);
    if (rewrite) write_generic(m);
    messages.push_back(std::move(m));
  }
  if (generic && out.tools.active()) {
    const std::string prompt = generic_tool_prompt(out.tools.tools, out.tools.parallel);
    if (messages[0]["role"] == "system" && messages[0].contains("content") &&
        messages[0]["content"].is_string())
      messages[0]["content"] = messages[0]["content"].get<std::string>() + "\n\n" + prompt;
    else
      messages.insert(messages.begin(), ojson{{"role", "system"}, {"content", prompt}});
  }
  vars["messages"] = std::move(messages);
  // As transformers' apply_chat_template: tools and documents are None when not sent (tools
  // also with tool_choice "none", so that the model is not led to call them).
  for (const char* key : {"tools", "documents"}) {
    vars[key] = nullptr;
    if (b.contains(key) && !b[key].is_null()) {
      if (!b[key].is_array()) throw invalid(fmt::format("'{}' must be an array", key));
      vars[key] = b[key];
    }
  }
  if (!out.tools.active()) vars["tools"] = nullptr;
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
    out.text = chat.tmpl->render(std::move(vars));
  } catch (const TemplateError& e) {
    throw invalid(
        e.raised()
            ? fmt::format("the chat template refused the conversation: {}", e.message())
            : fmt::format("the chat template failed on this conversation: {}", jinja::describe(e)));
  }
  return out;
}

ojson parse_ordered(std::string_view body) {
  // Parsed keeping key order: templates print tools and arguments in the order sent, schemas'
  // properties are asked for in it.
  ojson b = ojson::parse(body, nullptr, false);
  if (b.is_discarded()) throw invalid("the request body is not valid JSON");
  if (!b.is_object()) throw invalid("the request body must be a JSON object");
  return b;
}

}  // namespace

std::string render_chat(std::string_view body, const ChatSetup& chat) {
  return render(parse_ordered(body), chat).text;
}

CompletionBody parse_completion(std::string_view body, bool chat, const Tokenizer& tok,
                                const ChatSetup& setup, int n_ctx) {
  const json b = parse_body(body);
  const ojson ob = parse_ordered(body);
  refuse_unsupported(b);
  CompletionBody out;
  out.request = read_common(b, tok.n_vocab());
  out.request.grammar = read_grammar(b, ob);
  out.request.logprobs = read_logprobs(b, chat);
  // The rendered text holds the template's control tokens as text: parsed as special tokens.
  if (chat) {
    Rendered r = render(ob, setup);
    out.tools = std::move(r.tools);
    const std::string& text = r.text;
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
    out.request.starts_thinking = out.starts_thinking;
    if (b.contains("thinking_budget_tokens") && !b["thinking_budget_tokens"].is_null()) {
      out.request.thinking_budget = number<int32_t>(b, "thinking_budget_tokens", -1, -1, 1 << 30);
      out.budget_given = true;
    }
    // A call asked for: the reply is one, in the template's syntax, by the grammar.
    if (out.tools.choice == ToolUse::Choice::required ||
        out.tools.choice == ToolUse::Choice::named) {
      if (out.request.grammar)
        throw invalid(
            "'tool_choice' asks for a call, which a grammar makes the reply: give no "
            "'grammar' or 'response_format' beside it");
      try {
        out.request.grammar = std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(
            tool_call_grammar(setup.tool_format, out.tools.tools, out.tools.parallel)));
      } catch (const grammar::GrammarError& e) {
        throw invalid(fmt::format("'tools': {}", e.what()));
      }
    }
    if (out.budget_given && out.request.thinking_budget >= 0 && out.request.grammar)
      throw invalid(
          "'thinking_budget_tokens' bounds free text: give no 'grammar', "
          "'response_format' or a forced tool call beside it");
    out.request.prompt = encode_bounded(text, tok, n_ctx);
  } else {
    // Tools are for chat: a completion that offers some, or asks for a call, is refused.
    const ToolUse u = read_tools(ob);
    if (!u.tools.empty() || u.choice == ToolUse::Choice::required ||
        u.choice == ToolUse::Choice::named)
      throw invalid(
          "tool calls are for /v1/chat/completions: its template shows the model the "
          "tools");
    if (b.contains("messages")) throw invalid("'messages' is for /v1/chat/completions");
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

EmbeddingBody parse_embeddings(std::string_view body, const Tokenizer& tok, int n_ctx,
                               int64_t n_embd) {
  const json b = parse_body(body);
  if (b.contains("model") && !b["model"].is_null() && !b["model"].is_string())
    throw invalid("'model' must be a string");
  EmbeddingBody out;
  if (b.contains("encoding_format") && !b["encoding_format"].is_null()) {
    const json& f = b["encoding_format"];
    if (f != "float" && f != "base64")
      throw invalid("'encoding_format' must be \"float\" or \"base64\"");
    out.base64 = f == "base64";
  }
  if (b.contains("dimensions") && !b["dimensions"].is_null() &&
      (!b["dimensions"].is_number_integer() || b["dimensions"].get<int64_t>() != n_embd))
    throw invalid(fmt::format(
        "'dimensions' must be {}, this model's: its embeddings cannot be shortened", n_embd));
  if (!b.contains("input") || b["input"].is_null())
    throw invalid("'input' is required: a string, an array of strings or of token ids");
  const json& in = b["input"];
  const auto ids = [&](const json& a, const std::string& where) {
    std::vector<int32_t> t;
    for (const json& x : a) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tok.n_vocab())
        throw invalid(fmt::format("{} must hold token ids of this vocabulary", where));
      t.push_back(x.get<int32_t>());
    }
    return t;
  };
  const auto all_of = [](const json& a, bool (json::*is)() const noexcept) {
    return std::all_of(a.begin(), a.end(), [&](const json& x) { return (x.*is)(); });
  };
  std::vector<std::string> where;
  const auto text = [&](const json& t, const std::string& w) {
    // An empty text has no meaning to embed (OpenAI refuses it too), BOS or not.
    if (t.get_ref<const std::string&>().empty()) throw invalid(w + " is empty");
    return encode_bounded(t.get<std::string>(), tok, n_ctx);
  };
  if (in.is_string()) {
    out.inputs.push_back(text(in, "'input'"));
    where.push_back("'input'");
  } else if (in.is_array() && !in.empty() && all_of(in, &json::is_number_integer)) {
    out.inputs.push_back(ids(in, "'input'"));
    where.push_back("'input'");
  } else if (in.is_array() && !in.empty() && in.size() <= 2048 &&
             (all_of(in, &json::is_string) || all_of(in, &json::is_array))) {
    for (size_t i = 0; i < in.size(); ++i) {
      where.push_back(fmt::format("input[{}]", i));
      out.inputs.push_back(in[i].is_string() ? text(in[i], where.back())
                                             : ids(in[i], where.back()));
    }
  } else {
    throw invalid(
        "'input' must be a string, an array of 1 to 2048 strings, an array of token ids or an "
        "array of such arrays");
  }
  for (size_t i = 0; i < out.inputs.size(); ++i) {
    if (out.inputs[i].empty()) throw invalid(fmt::format("{} is empty", where[i]));
    if (int64_t(out.inputs[i].size()) >= n_ctx)
      throw ApiError(400, "exceed_context_size_error",
                     fmt::format("{} has {} tokens but a slot holds {} (-c)", where[i],
                                 out.inputs[i].size(), n_ctx),
                     {{"n_prompt_tokens", out.inputs[i].size()}, {"n_ctx", n_ctx}});
  }
  return out;
}

std::string base64_floats(const std::vector<float>& v) {
  constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int k = 0; k < 4; ++k) bytes[4 * i + size_t(k)] = char((u >> (8 * k)) & 0xFF);
  }
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t chunk = 0;
    for (size_t k = 0; k < 3; ++k) chunk = (chunk << 8) | (k < n ? uint8_t(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kDigits[(chunk >> (18 - 6 * k)) & 63] : '=';
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
