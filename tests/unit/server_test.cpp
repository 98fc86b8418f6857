// The server's text handling without HTTP: chat requests rendered with templates, and the request
// bodies read without HTTP (server/request.h), each malformed field a 400 naming it and random
// damage to a valid body never giving anything but an ApiError. The engine's own tests are in
// engine_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "engine/model_context.h"
#include "server/request.h"
#include "stories_model.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ps::server {
namespace {

using test::stories;

// A chat setup on one of the built-in templates.
struct Chat {
  jinja::ChatTemplate tmpl;
  ChatSetup setup;
  explicit Chat(const char* name, std::optional<bool> thinking = std::nullopt)
      : tmpl(jinja::choose_chat_template(name, "", "llama"), "<s>", "</s>", true) {
    setup.tmpl = &tmpl;
    setup.enable_thinking = thinking;
  }
};

TEST(ServerChat, MessagesToolsAndKwargsReachTheTemplate) {
  Chat chatml("chatml");
  EXPECT_EQ(
      render_chat(R"({"messages": [{"role": "developer", "content": "S"},
                                           {"role": "user", "content": [{"type": "text", "text": "H"},
                                                                        {"type": "text", "text": "i"}]}]})",
                  chatml.setup),
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A template of one's own reads tools, kwargs and the server's thinking default; key order is
  // the request's.
  const char* src =
      "{{ bos_token }}{{ tools | tojson }}|{{ enable_thinking }}|{{ flavour | default('none') }}|"
      "{{ messages | length }}";
  jinja::ChatTemplate own({src, "test", "a test template"}, "<s>", "</s>", true);
  ChatSetup setup{&own, false};
  EXPECT_EQ(render_chat(R"({"messages": [{"role": "user", "content": "x"}],
                            "tools": [{"z": 1, "a": 2}]})",
                        setup),
            R"([{"z": 1, "a": 2}]|False|none|1)");  // the leading BOS text is stripped
  EXPECT_EQ(render_chat(R"({"messages": [{"role": "user", "content": "x"}],
                            "chat_template_kwargs": {"enable_thinking": true, "flavour": "mint"}})",
                        setup),
            "null|True|mint|1");
}

TEST(ServerChat, TemplateFailuresAreClientErrorsNamingTheTemplatesMessage) {
  Chat gemma("gemma");
  try {
    render_chat(R"({"messages": [{"role": "tool", "content": "x"}]})", gemma.setup);
    FAIL() << "a role gemma has no turn for rendered";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(std::string(e.what()),
              "the chat template refused the conversation: Gemma's turns are user and assistant "
              "(got 'tool')");
  }
  jinja::ChatTemplate broken({"{{ messages[0].content.upper() + 1 }}", "test", "test"}, "", "",
                             false);
  ChatSetup setup{&broken, std::nullopt};
  try {
    render_chat(R"({"messages": [{"role": "user", "content": "x"}]})", setup);
    FAIL() << "str + int rendered";
  } catch (const ApiError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the chat template failed on this conversation: template line 1: can only "
              "concatenate str (not \"int\") to str");
  }
  EXPECT_THROW(render_chat(R"({"messages": [{"role": "user", "content": "x"}],
                               "chat_template_kwargs": [1]})",
                           setup),
               ApiError);
  EXPECT_THROW(
      render_chat(R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", setup),
      ApiError);
}

// The status, type and message of the error a body gives ("" when it parses).
std::string error_of(const Tokenizer& tok, std::string_view body, bool chat = false) {
  Chat chatml("chatml");
  try {
    parse_completion(body, chat, tok, chatml.setup, 64);
  } catch (const ApiError& e) {
    return fmt::format("{} {}: {}", e.status, e.type, e.what());
  }
  return "";
}

TEST(ServerRequest, FieldsAreCheckedAndNamed) {
  auto m = stories();
  if (!m) GTEST_SKIP() << "stories260K not found in ../shared/models";
  const Tokenizer& tok = *m->tokenizer;
  EXPECT_EQ(error_of(tok, "{"), "400 invalid_request_error: the request body is not valid JSON");
  EXPECT_EQ(error_of(tok, "[1]"),
            "400 invalid_request_error: the request body must be a JSON object");
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "n": 2})"),
            "400 invalid_request_error: 'n' must be 1: one choice per request");
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "temperature": "hot"})"),
            "400 invalid_request_error: 'temperature' must be a number");
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "top_p": 1.5})"),
            "400 invalid_request_error: 'top_p' must be in [0, 1]");
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "max_tokens": 0})"),
            "400 invalid_request_error: 'max_tokens' must be in [1, 1000000000]");
  EXPECT_EQ(error_of(tok, R"({"prompt": [1, 999999]})"),
            "400 invalid_request_error: token id 999999 is outside the vocabulary");
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "stream_options": 3})"),
            "400 invalid_request_error: 'stream_options' must be an object");
  EXPECT_EQ(error_of(tok, R"({"messages": [{"role": 7, "content": "hi"}]})", true),
            "400 invalid_request_error: messages[0] must be an object with a string 'role'");
  EXPECT_EQ(error_of(tok, R"({"messages": [{"role": "wizard", "content": "hi"}]})", true),
            "400 invalid_request_error: messages[0]: unknown role 'wizard' (system, developer, "
            "user, assistant, tool or function)");
  // Fields whose meaning is not given yet are refused by name, whatever their shape.
  for (const char* field :
       {R"("tools": [{"type": "function"}])", R"("tool_choice": "auto")", R"("functions": [])"}) {
    const std::string e = error_of(tok, fmt::format(R"({{"prompt": "a", {}}})", field));
    EXPECT_EQ(e.rfind("400 invalid_request_error: '", 0), 0u) << field << ": " << e;
    EXPECT_NE(e.find("is not supported yet"), std::string::npos) << field << ": " << e;
  }
  for (const char* field :
       {R"("tools": [])", R"("tool_choice": "none")", R"("tools": null)",
        R"("response_format": {"type": "text"})", R"("logprobs": false)", R"("top_logprobs": 0)"})
    EXPECT_EQ(error_of(tok, fmt::format(R"({{"prompt": "a", {}}})", field)), "") << field;
  EXPECT_EQ(
      error_of(tok, R"({"messages": [{"role": "user", "content": "hi"}], "reasoning_format": 3})",
               true),
      "400 invalid_request_error: 'reasoning_format' must be one of auto, deepseek, none");
  // Log-probabilities: the legacy count on completions, a boolean and top_logprobs on chat.
  for (const char* field : {R"("logprobs": 3)", R"("logprobs": true)", R"("logprobs": 0)"})
    EXPECT_EQ(error_of(tok, fmt::format(R"({{"prompt": "a", {}}})", field)), "") << field;
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "logprobs": 6})"),
            "400 invalid_request_error: 'logprobs' must be an integer in [0, 5] on completions");
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "top_logprobs": 2})"),
            "400 invalid_request_error: 'top_logprobs' is for chat; completions take 'logprobs' "
            "N");
  const std::string hi = R"("messages": [{"role": "user", "content": "hi"}])";
  EXPECT_EQ(error_of(tok, fmt::format(R"({{{}, "logprobs": true, "top_logprobs": 20}})", hi), true),
            "");
  EXPECT_EQ(error_of(tok, fmt::format(R"({{{}, "logprobs": 2}})", hi), true),
            "400 invalid_request_error: 'logprobs' must be a boolean on chat completions");
  EXPECT_EQ(error_of(tok, fmt::format(R"({{{}, "logprobs": true, "top_logprobs": 21}})", hi), true),
            "400 invalid_request_error: 'top_logprobs' must be an integer in [0, 20]");
  EXPECT_EQ(error_of(tok, fmt::format(R"({{{}, "top_logprobs": 3}})", hi), true),
            "400 invalid_request_error: 'top_logprobs' needs 'logprobs': true");
  // Constrained decoding: a grammar or a response format; their mistakes are 400s naming them.
  for (const char* field :
       {R"("response_format": {"type": "json_object"})", R"("grammar": "root ::= [a-z]+")",
        R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
            {"type": "object", "properties": {"a": {"type": "integer"}}}}})",
        R"("response_format": {"type": "json_object", "schema": {"type": "array"}})"})
    EXPECT_EQ(error_of(tok, fmt::format(R"({{"prompt": "a", {}}})", field)), "") << field;
  for (const auto& [field, want] : std::vector<std::pair<const char*, const char*>>{
           {R"("response_format": {"type": 5})", "'response_format' must be an object with a"},
           {R"("response_format": "json")", "'response_format' must be an object with a"},
           {R"("response_format": {"type": "yaml"})", "type 'yaml' is not one of"},
           {R"("response_format": {"type": "json_schema"})", "needs 'json_schema.schema'"},
           {R"("response_format": {"type": "json_schema", "json_schema": {"schema":
                {"not": {"type": "string"}}}})",
            "'response_format': json_schema: 'not'"},
           {R"("grammar": "root ::= foo")", "'grammar': grammar: rule 'foo' is used but not"},
           {R"("grammar": 5)", "'grammar' must be a string"},
           {R"("grammar": "root ::= [a]", "response_format": {"type": "json_object"})",
            "give 'grammar' or 'response_format', not both"}}) {
    const std::string e = error_of(tok, fmt::format(R"({{"prompt": "a", {}}})", field));
    EXPECT_EQ(e.rfind("400 invalid_request_error: ", 0), 0u) << field << ": " << e;
    EXPECT_NE(e.find(want), std::string::npos) << field << ": " << e;
  }
  const std::string long_prompt = fmt::format(R"({{"prompt": "{}"}})", std::string(200, 'a'));
  EXPECT_EQ(error_of(tok, long_prompt).substr(0, 30), "400 exceed_context_size_error:");
  // A prompt whose length alone rules it out is refused before it is tokenized.
  ASSERT_GT(tok.min_tokens(1 << 20), 64u);
  const std::string huge = fmt::format(R"({{"prompt": "{}"}})", std::string(1 << 20, 'a'));
  EXPECT_EQ(error_of(tok, huge).rfind("400 exceed_context_size_error: the prompt has at least ", 0),
            0u)
      << error_of(tok, huge).substr(0, 200);
  // /tokenize has its own bound.
  try {
    parse_tokenize(fmt::format(R"({{"content": "{}"}})", std::string((4 << 20) + 1, 'a')), tok);
    ADD_FAILURE() << "a 4 MiB + 1 byte /tokenize was taken";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("at most"), std::string::npos) << e.what();
  }
}

TEST(ServerRequest, ValidBodiesGiveTheEngineRequest) {
  auto m = stories();
  if (!m) GTEST_SKIP() << "stories260K not found in ../shared/models";
  const Tokenizer& tok = *m->tokenizer;
  const CompletionBody c = parse_completion(
      R"({"prompt": "Once upon", "max_tokens": 5, "stop": ["x", "y"], "stream": true,
          "stream_options": {"include_usage": true}, "seed": 3, "temperature": 0})",
      false, tok, Chat("chatml").setup, 64);
  EXPECT_EQ(c.request.prompt, tok.encode("Once upon", true, true));
  EXPECT_EQ(c.request.max_tokens, 5);
  EXPECT_EQ(c.request.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(c.stream && c.include_usage);
  Chat chatml("chatml");
  const CompletionBody chat = parse_completion(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})", true, tok,
      chatml.setup, 64);
  EXPECT_EQ(chat.request.prompt,
            tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", true, true));
  EXPECT_TRUE(chat.request.stop.empty());  // the end-of-turn tokens end a reply
  EXPECT_EQ(parse_detokenize(R"({"tokens": [1, 2]})", tok), (std::vector<int32_t>{1, 2}));
  EXPECT_THROW(parse_detokenize(R"({"tokens": [-1]})", tok), ApiError);
  EXPECT_THROW(parse_tokenize(R"({"content": 1})", tok), ApiError);
}

TEST(ServerRequest, DamagedBodiesOnlyEverGiveApiErrors) {
  auto m = stories();
  if (!m) GTEST_SKIP() << "stories260K not found in ../shared/models";
  const Tokenizer& tok = *m->tokenizer;
  const std::string valid =
      R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "top_k": 3,
          "stop": "x", "stream": false, "prompt": [1, 2, 3], "n": 1})";
  Chat gemma("gemma");
  std::mt19937 rng(11);
  const std::string alphabet = "{}[]\":,0123456789-.eE tfnulrs\\\xff\x80";
  int parsed = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string s = valid;
    for (int k = int(rng() % 4); k >= 0; --k) {
      const size_t at = rng() % s.size();
      if (rng() % 2)
        s[at] = alphabet[rng() % alphabet.size()];
      else
        s.erase(at, 1 + rng() % 4);
      if (s.empty()) s.push_back('{');
    }
    for (bool chat : {false, true}) {
      try {
        parse_completion(s, chat, tok, gemma.setup, 64);
        ++parsed;
      } catch (const ApiError&) {
      }
    }
  }
  EXPECT_GT(parsed, 0);  // some damage leaves a valid body, so both paths ran
}

}  // namespace
}  // namespace ps::server
