// The server's text handling without HTTP: chat requests rendered with templates, and the request
// bodies read without HTTP (server/request.h), each malformed field a 400 naming it and random
// damage to a valid body never giving anything but an ApiError. The engine's own tests are in
// engine_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

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
                            "tools": [{"type": "function", "function": {"name": "f",
                                       "parameters": {"z": 1, "a": 2}}}]})",
                        setup),
            R"([{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}])"
            "|False|none|2");  // the leading BOS text is stripped; a system message teaches tools
  EXPECT_EQ(render_chat(R"({"messages": [{"role": "user", "content": "x"}],
                            "chat_template_kwargs": {"enable_thinking": true, "flavour": "mint"}})",
                        setup),
            "null|True|mint|1");
}

TEST(ServerChat, TemplateFailuresAreClientErrorsNamingTheTemplatesMessage) {
  Chat gemma("gemma");
  gemma.setup.tool_format = ToolFormat::hermes;  // tool results are not rewritten as user turns
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
std::string error_of(const Tokenizer& tok, std::string_view body, bool chat = false,
                     int n_ctx = 64) {
  Chat chatml("chatml");
  try {
    parse_completion(body, chat, tok, chatml.setup, n_ctx);
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
  // Tools on completions, and the legacy functions, are refused by name.
  const char* tool = R"({"type": "function", "function": {"name": "f"}})";
  EXPECT_EQ(error_of(tok, fmt::format(R"({{"prompt": "a", "tools": [{}]}})", tool)),
            "400 invalid_request_error: tool calls are for /v1/chat/completions: its template "
            "shows the model the tools");
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "functions": []})"),
            "400 invalid_request_error: 'functions' is the deprecated form of tools: send "
            "'tools' and 'tool_choice'");
  for (const char* field : {R"("tools": [])", R"("tool_choice": "none")", R"("tools": null)",
                            R"("tool_choice": "auto")", R"("response_format": {"type": "text"})",
                            R"("logprobs": false)", R"("top_logprobs": 0)"})
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

// A chat body with `extra` fields beside one user message.
std::string chat_body(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "weather?"}], )" + extra + "}";
}

const char* kTools = R"("tools": [{"type": "function", "function": {"name": "get_weather",
    "description": "d", "parameters": {"type": "object", "properties": {"city": {"type":
    "string"}}, "required": ["city"]}}}, {"type": "function", "function": {"name": "now"}}])";

TEST(ServerTools, FieldsAreCheckedAndNamed) {
  auto m = stories();
  if (!m) GTEST_SKIP() << "stories260K not found in ../shared/models";
  const Tokenizer& tok = *m->tokenizer;
  for (const auto& [extra, want] : std::vector<std::pair<std::string, std::string>>{
           {R"("tools": {})", "'tools' must be an array"},
           {R"("tools": [{"type": "retrieval"}])",
            "tools[0]: type 'retrieval' is not supported (function only)"},
           {R"("tools": [{"type": "function"}])", "tools[0]: 'function' must be an object"},
           {R"("tools": [{"type": "function", "function": {"name": "a b"}}])",
            "tools[0].function.name 'a b' must be 1 to 64 letters, digits, '_', '-' or '.'"},
           {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}])",
            "tools[0].function.parameters must be an object (a JSON Schema)"},
           {R"("tools": [{"type": "function", "function": {"name": "f"}},
                         {"type": "function", "function": {"name": "f"}}])",
            "tools[1]: a second tool named 'f'"},
           {R"("tool_choice": "required")",
            "'tool_choice' asks for a call but 'tools' offers none"},
           {std::string(kTools) + R"(, "tool_choice": "always")", "'tool_choice' must be \"none\""},
           {std::string(kTools) +
                R"(, "tool_choice": {"type": "function", "function": {"name": "set_weather"}})",
            "'tool_choice' names 'set_weather', which is not in 'tools'"},
           {std::string(kTools) + R"(, "parallel_tool_calls": "yes")",
            "'parallel_tool_calls' must be a boolean"},
           {std::string(kTools) +
                R"(, "tool_choice": "required", "response_format": {"type": "json_object"})",
            "'tool_choice' asks for a call, which a grammar makes the reply"},
           {R"("tools": [{"type": "function", "function": {"name": "f", "parameters":
                {"type": "object", "properties": {"x": {"not": {}}}}}}], "tool_choice": "required")",
            "'tools': tool 'f': its parameters: json_schema: 'not' at /properties/x is not "
            "supported"},
       }) {
    const std::string e = error_of(tok, chat_body(extra), true, 1 << 16);
    EXPECT_EQ(e.rfind("400 invalid_request_error: " + want, 0), 0u) << extra << ": " << e;
  }
  EXPECT_EQ(
      error_of(tok, chat_body(std::string(kTools) + R"(, "tool_choice": "auto")"), true, 1 << 16),
      "");
}

TEST(ServerTools, ChoiceSetsTheGrammarAndWhatTheTemplateSees) {
  auto m = stories();
  if (!m) GTEST_SKIP() << "stories260K not found in ../shared/models";
  const Tokenizer& tok = *m->tokenizer;
  const char* src = "{{ tools | tojson if tools else 'none' }}|{{ messages | length }}";
  jinja::ChatTemplate own({src, "test", "a test template"}, "", "", false);
  ChatSetup setup{&own, std::nullopt, ToolFormat::hermes};
  CompletionBody b = parse_completion(chat_body(kTools), true, tok, setup, 1 << 16);
  EXPECT_TRUE(b.tools.active());
  EXPECT_EQ(b.tools.tools.size(), 2u);
  EXPECT_FALSE(b.request.grammar) << "auto: the model chooses";
  EXPECT_EQ(tok.decode(b.request.prompt).rfind(R"([{"type": "function", "function)", 0), 0u);
  b = parse_completion(chat_body(std::string(kTools) + R"(, "tool_choice": "none")"), true, tok,
                       setup, 1 << 16);
  EXPECT_FALSE(b.tools.active());
  EXPECT_EQ(tok.decode(b.request.prompt), "none|1") << "tool_choice none: no tools shown";
  b = parse_completion(chat_body(std::string(kTools) + R"(, "tool_choice": "required")"), true, tok,
                       setup, 1 << 16);
  ASSERT_TRUE(b.request.grammar);
  b = parse_completion(
      chat_body(std::string(kTools) +
                R"(, "tool_choice": {"type": "function", "function": {"name": "now"}},
                    "parallel_tool_calls": false)"),
      true, tok, setup, 1 << 16);
  ASSERT_TRUE(b.request.grammar);
  ASSERT_EQ(b.tools.tools.size(), 1u);
  EXPECT_EQ(b.tools.tools[0].name, "now");
  EXPECT_FALSE(b.tools.parallel);
}

// A conversation with a call and its result, as OpenAI's clients send it.
const char* kHistory = R"({"messages": [
    {"role": "user", "content": "weather in Oslo?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"}], )";

TEST(ServerTools, GenericFormHistoryAndSystemMessage) {
  Chat chatml("chatml");  // no tool syntax: the generic form
  const std::string text = render_chat(std::string(kHistory) + kTools + "}", chatml.setup);
  EXPECT_EQ(text.rfind("<|im_start|>system\nYou can call these tools", 0), 0u) << text;
  EXPECT_NE(text.find(R"({"name":"get_weather","description":"d","parameters":{"type":"object")"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<|im_start|>assistant\n{\"tool_calls\":[{\"name\":\"get_weather\","
                      "\"arguments\":{\"city\":\"Oslo\"}}]}<|im_end|>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<|im_start|>user\n{\"tool_response\":{\"tool_call_id\":\"call_1\","
                      "\"content\":\"-3 C\"}}<|im_end|>"),
            std::string::npos)
      << text;
  // A system message of the client's own gets the tools after its text.
  const std::string with_system = render_chat(
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "hi"}], )" +
          std::string(kTools) + "}",
      chatml.setup);
  EXPECT_EQ(with_system.rfind("<|im_start|>system\nBe brief.\n\nYou can call these tools", 0), 0u)
      << with_system;
  // A template that names the tool role keeps its own place for results.
  jinja::ChatTemplate own({"{% for m in messages %}{{ m.role }}{{ '!' if m.role == 'tool' }}|"
                           "{% endfor %}",
                           "test", "test"},
                          "", "", false);
  const ChatSetup own_setup{&own, std::nullopt, ToolFormat::none};
  EXPECT_EQ(render_chat(std::string(kHistory) + kTools + "}", own_setup),
            "system|user|assistant|tool!|");
}

TEST(ServerTools, TemplatesGetArgumentsAsObjects) {
  const std::filesystem::path p =
      std::filesystem::path(POLYSTACK_SHARED_DIR) / "chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja";
  if (!std::filesystem::exists(p)) GTEST_SKIP() << "no " << p;
  std::ifstream in(p);
  std::stringstream src;
  src << in.rdbuf();
  jinja::ChatTemplate qwen({src.str(), "qwen", "Qwen2.5"}, "", "<|im_end|>", false);
  ChatSetup setup{&qwen, std::nullopt, detect_tool_format(src.str())};
  ASSERT_EQ(setup.tool_format, ToolFormat::hermes);
  const std::string text = render_chat(std::string(kHistory) + kTools + "}", setup);
  // The call as the template writes it (arguments an object, not a string in a string), and
  // the result in its tool_response block.
  EXPECT_NE(text.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                      "\"Oslo\"}}\n</tool_call>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<tool_response>\n-3 C\n</tool_response>"), std::string::npos) << text;
  EXPECT_NE(text.find("\"name\": \"get_weather\""), std::string::npos) << "the tools are listed";
}

TEST(ServerEmbeddings, InputsAndFields) {
  auto m = stories();
  if (!m) GTEST_SKIP() << "stories260K not found in ../shared/models";
  const Tokenizer& tok = *m->tokenizer;
  EmbeddingBody b = parse_embeddings(R"({"input": "Once upon", "encoding_format": "base64",
                                          "dimensions": 64})",
                                     tok, 64, 64);
  ASSERT_EQ(b.inputs.size(), 1u);
  EXPECT_EQ(b.inputs[0], tok.encode("Once upon", true, true));
  EXPECT_TRUE(b.base64);
  b = parse_embeddings(R"({"input": ["a", "b c"]})", tok, 64, 64);
  ASSERT_EQ(b.inputs.size(), 2u);
  EXPECT_EQ(b.inputs[1], tok.encode("b c", true, true));
  EXPECT_EQ(parse_embeddings(R"({"input": [1, 2, 3]})", tok, 64, 64).inputs,
            (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(parse_embeddings(R"({"input": [[1], [2, 3]]})", tok, 64, 64).inputs,
            (std::vector<std::vector<int32_t>>{{1}, {2, 3}}));
  const auto error = [&](const std::string& body) {
    try {
      parse_embeddings(body, tok, 64, 64);
    } catch (const ApiError& e) {
      return fmt::format("{} {}: {}", e.status, e.type, e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(R"({"input": ""})"), "400 invalid_request_error: 'input' is empty");
  EXPECT_EQ(error(R"({"input": ["a", ""]})"), "400 invalid_request_error: input[1] is empty");
  EXPECT_EQ(error(R"({"input": [[1], []]})"), "400 invalid_request_error: input[1] is empty");
  EXPECT_EQ(error(R"({})").rfind("400 invalid_request_error: 'input' is required", 0), 0u);
  EXPECT_EQ(error(R"({"input": [1, "a"]})").rfind("400 invalid_request_error: 'input' must be", 0),
            0u);
  EXPECT_EQ(error(R"({"input": [[1, -2]]})"),
            "400 invalid_request_error: input[0] must hold token ids of this vocabulary");
  EXPECT_EQ(error(R"({"input": "a", "dimensions": 32})"),
            "400 invalid_request_error: 'dimensions' must be 64, this model's: its embeddings "
            "cannot be shortened");
  EXPECT_EQ(error(R"({"input": "a", "encoding_format": "hex"})"),
            "400 invalid_request_error: 'encoding_format' must be \"float\" or \"base64\"");
  EXPECT_EQ(error(fmt::format(R"({{"input": ["a", "{}"]}})", std::string(300, 'z')))
                .rfind("400 exceed_context_size_error: ", 0),
            0u);
  std::string many = R"({"input": [)";
  for (int i = 0; i < 2049; ++i) many += std::string(i ? "," : "") + "\"a\"";
  EXPECT_EQ(error(many + "]}").rfind("400 invalid_request_error: 'input' must be", 0), 0u);
  // base64: the floats' little-endian bytes (1.0f is 00 00 80 3f; -2.5f is 00 00 20 c0).
  EXPECT_EQ(base64_floats({1.0f}), "AACAPw==");
  EXPECT_EQ(base64_floats({1.0f, -2.5f}), "AACAPwAAIMA=");
  EXPECT_EQ(base64_floats({1.0f, -2.5f, 0.0f}), "AACAPwAAIMAAAAAA");
  EXPECT_EQ(base64_floats({}), "");
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
