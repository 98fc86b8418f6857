// Tool calls read out of replies (engine/tool_calls.h): for each family, replies as its models
// write them (one call, several, text around them), and malformed or cut ones, which come back
// whole as content. Which syntax a template teaches, on the real templates of ../shared.
#include "engine/tool_calls.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace ps {
namespace {

struct Want {
  std::string name, arguments, id = "";
};

void expect_calls(ToolFormat f, const std::string& text, const std::vector<Want>& want,
                  const std::string& content = "") {
  const ToolReply r = parse_tool_calls(f, text);
  ASSERT_TRUE(r.parsed) << tool_format_name(f) << ": " << text;
  ASSERT_EQ(r.calls.size(), want.size()) << tool_format_name(f) << ": " << text;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(r.calls[i].name, want[i].name) << text;
    EXPECT_EQ(r.calls[i].arguments, want[i].arguments) << text;
    EXPECT_EQ(r.calls[i].id, want[i].id) << text;
  }
  EXPECT_EQ(r.content, content) << text;
}

void expect_unparsed(ToolFormat f, const std::string& text) {
  const ToolReply r = parse_tool_calls(f, text);
  EXPECT_FALSE(r.parsed) << tool_format_name(f) << ": " << text;
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, text);
}

TEST(ToolCalls, Hermes) {
  const auto f = ToolFormat::hermes;
  expect_calls(f,
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
               "\"unit\": \"c\"}}\n</tool_call>",
               {{"get_weather", R"({"city":"Paris","unit":"c"})"}});
  expect_calls(f,
               "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n"
               "</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, \"}\"]}}"
               "\n</tool_call>",
               {{"a", "{}"}, {"b", R"({"x":[1,"}"]})"}}, "Let me check both.");
  // The closing tag cut off by the end of generation: the call is whole, so it counts.
  expect_calls(f, "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"k\\\": 2}\"}",
               {{"a", R"({"k":2})"}});
  expect_calls(f, "No tools needed: 4.", {}, "No tools needed: 4.");
  expect_unparsed(f, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": ");
  expect_unparsed(f, "<tool_call>\n{\"arguments\": {}}\n</tool_call>");
  expect_unparsed(f, "<tool_call>\nget_weather(city=Paris)\n</tool_call>");
}

TEST(ToolCalls, Qwen3Coder) {
  expect_calls(ToolFormat::qwen3_coder,
               "I'll look.\n<tool_call>\n<function=search>\n<parameter=query>\nbest pizza\n"
               "</parameter>\n<parameter=count>\n3\n</parameter>\n</function>\n</tool_call>",
               {{"search", R"({"query":"best pizza","count":3})"}}, "I'll look.");
  expect_unparsed(ToolFormat::qwen3_coder,
                  "<tool_call>\n<function=search>\n<parameter=query>\nbest");
}

TEST(ToolCalls, Llama3) {
  const auto f = ToolFormat::llama3;
  expect_calls(f, R"({"name": "get_weather", "parameters": {"city": "Oslo"}})",
               {{"get_weather", R"({"city":"Oslo"})"}});
  expect_calls(
      f,
      R"({"type": "function", "name": "a", "parameters": {}}; {"name": "b", "parameters": {"n": 1}})",
      {{"a", "{}"}, {"b", R"({"n":1})"}});
  expect_calls(f, "<|python_tag|>brave_search.call(query=\"polystack news\", count=2)",
               {{"brave_search", R"({"query":"polystack news","count":2})"}});
  expect_calls(f, R"(<|python_tag|>{"name": "f", "parameters": {"x": true}})",
               {{"f", R"({"x":true})"}});
  expect_calls(f, "{The braces are part of the answer.}", {},
               "{The braces are part of the answer.}");
  expect_unparsed(f, "<|python_tag|>brave_search.call(query=\"unterminated)");
}

TEST(ToolCalls, Mistral) {
  const auto f = ToolFormat::mistral;
  expect_calls(f,
               R"([TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "Ab3dE5gH9"}])",
               {{"add", R"({"a":1,"b":2})", "Ab3dE5gH9"}});
  expect_calls(f, "Sure.[TOOL_CALLS]add[ARGS]{\"a\": 1}[TOOL_CALLS]mul[ARGS]{\"b\": 2}",
               {{"add", R"({"a":1})"}, {"mul", R"({"b":2})"}}, "Sure.");
  expect_calls(f, "[TOOL_CALLS]add[CALL_ID]x1[ARGS]{}", {{"add", "{}", "x1"}});
  expect_unparsed(f, "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": ");
  expect_unparsed(f, "[TOOL_CALLS]add{\"a\": 1}");
}

TEST(ToolCalls, GptOss) {
  const auto f = ToolFormat::gpt_oss;
  expect_calls(f,
               "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
               "commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\":"
               "\"Tokyo\"}<|call|>",
               {{"get_weather", R"({"location":"Tokyo"})"}});
  expect_calls(f, "<|channel|>final<|message|>It is sunny.<|return|>", {}, "It is sunny.");
  expect_unparsed(f, "<|channel|>commentary to=functions.get_weather <|message|>{\"loc");
}

TEST(ToolCalls, DeepSeek) {
  const auto f = ToolFormat::deepseek;
  expect_calls(f,
               "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
               "```json\n{\"city\": \"Lima\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
               {{"get_weather", R"({"city":"Lima"})"}});
  expect_calls(f,
               "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{\"x\": 1}"
               "<｜tool▁call▁end｜><｜tool▁call▁begin｜>b<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
               "<｜tool▁calls▁end｜>",
               {{"a", R"({"x":1})"}, {"b", "{}"}}, "Checking.");
  expect_unparsed(f,
                  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{");
}

TEST(ToolCalls, GraniteAndCommandR7B) {
  expect_calls(
      ToolFormat::granite,
      R"(<|tool_call|>[{"name": "a", "arguments": {"q": "x"}}, {"name": "b", "arguments": {}}])",
      {{"a", R"({"q":"x"})"}, {"b", "{}"}});
  expect_unparsed(ToolFormat::granite, R"(<|tool_call|>[{"name": "a", "arguments": {"q": )");
  expect_calls(ToolFormat::command_r7b,
               "<|START_THINKING|>Use the tool.<|END_THINKING|><|START_ACTION|>[\n"
               "{\"tool_call_id\": \"0\", \"tool_name\": \"search\", \"parameters\": {\"q\": "
               "\"cats\"}}\n]<|END_ACTION|>",
               {{"search", R"({"q":"cats"})", "0"}});
  expect_calls(ToolFormat::command_r7b, "<|START_RESPONSE|>Hello!<|END_RESPONSE|>", {}, "Hello!");
}

TEST(ToolCalls, GenericJson) {
  const auto f = ToolFormat::none;
  expect_calls(f, R"({"tool_calls": [{"name": "a", "arguments": {"k": "v"}, "id": "c1"}]})",
               {{"a", R"({"k":"v"})", "c1"}});
  expect_calls(f, R"({"tool_call": {"name": "a", "arguments": {}}})", {{"a", "{}"}});
  expect_calls(f, R"({"response": "Just words."})", {}, "Just words.");
  expect_calls(f, "Plain text.", {}, "Plain text.");
}

TEST(ToolCalls, EveryFormatSurvivesCutReplies) {
  // Every prefix of every recorded reply: a result, never an exception.
  const std::map<ToolFormat, std::string> replies = {
      {ToolFormat::hermes,
       "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": [1]}}\n</tool_call>"},
      {ToolFormat::qwen3_coder,
       "<tool_call>\n<function=s>\n<parameter=q>\nx\n</parameter>\n</function>\n</tool_call>"},
      {ToolFormat::llama3, "<|python_tag|>s.call(q=\"x\", n=2)"},
      {ToolFormat::mistral, "[TOOL_CALLS]add[CALL_ID]x1[ARGS]{\"a\": 1}"},
      {ToolFormat::gpt_oss, "<|channel|>commentary to=functions.f <|message|>{\"a\":1}<|call|>"},
      {ToolFormat::deepseek,
       "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>"},
      {ToolFormat::command_r7b, "<|START_ACTION|>[{\"tool_name\": \"s\", \"parameters\": {}}]"},
      {ToolFormat::none, "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}]}"}};
  for (const auto& [f, text] : replies)
    for (size_t n = 0; n <= text.size(); ++n) {
      const ToolReply r = parse_tool_calls(f, text.substr(0, n));
      if (!r.parsed) {
        EXPECT_EQ(r.content, text.substr(0, n));
      }
    }
}

TEST(ToolCalls, TheRealTemplatesTeachTheirFamilysSyntax) {
  const std::filesystem::path dir = std::filesystem::path(POLYSTACK_SHARED_DIR) / "chat-templates";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  const std::map<std::string, ToolFormat> want = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolFormat::hermes},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ToolFormat::hermes},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolFormat::llama3},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolFormat::llama3},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolFormat::mistral},
      {"llama-cpp-deepseek-r1.jinja", ToolFormat::deepseek},
      {"deepseek-ai-DeepSeek-V3.1.jinja", ToolFormat::deepseek},
      {"Cohere2MoE.jinja", ToolFormat::command_r7b},
      {"Qwen3.5-4B.jinja", ToolFormat::qwen3_coder},
  };
  for (const auto& [file, format] : want) {
    std::ifstream in(dir / file);
    ASSERT_TRUE(in) << file;
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(tool_format_name(detect_tool_format(ss.str())), std::string(tool_format_name(format)))
        << file;
  }
}

}  // namespace
}  // namespace ps
