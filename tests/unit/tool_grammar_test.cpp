// The grammar that makes a reply a tool call (engine/tool_calls.h), for each family: a call as
// that family writes it is a sentence and reads back as the same call; a wrong name, arguments
// outside the function's parameters, a second call without `parallel` are not. The marks and
// openers each family's reply is read by.
#include <gtest/gtest.h>

#include <memory>

#include "engine/tool_calls.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace ps {
namespace {

using ojson = nlohmann::ordered_json;

std::vector<ToolSpec> tools() {
  return {
      {"get_weather", "The weather in a city",
       ojson::parse(R"({"type": "object", "properties": {"city": {"type": "string"},
                        "unit": {"enum": ["c", "f"]}}, "required": ["city"]})")},
      {"add", "",
       ojson::parse(R"({"$defs": {"n": {"type": "integer", "minimum": 0}}, "type": "object",
                        "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "#/$defs/n"}},
                        "required": ["a", "b"]})")},
  };
}

// Whether `text` is a whole sentence of the grammar.
bool sentence(const std::string& gbnf, const std::string& text) {
  grammar::Matcher m(std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(gbnf)));
  return m.accept(text) && m.can_end();
}

struct Case {
  ToolFormat format;
  std::string add_call;       // add(a=1, b=20)
  std::string weather_call;   // get_weather(city="Paris")
  std::string two_calls;      // both, one after the other
  std::string bad_arguments;  // add with a: -1 (under the minimum)
};

std::vector<Case> cases() {
  return {
      {ToolFormat::none, R"({"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 20}}]})",
       R"({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]})",
       R"({"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 20}}, {"name": "get_weather", "arguments": {"city": "Paris"}}]})",
       R"({"tool_calls": [{"name": "add", "arguments": {"a": -1, "b": 20}}]})"},
      {ToolFormat::hermes,
       "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 20}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
       "</tool_call>",
       "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 20}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
       "</tool_call>",
       "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": -1, \"b\": 20}}\n</tool_call>"},
      {ToolFormat::qwen3_coder,
       "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n20\n"
       "</parameter>\n</function>\n</tool_call>",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\n\"Paris\"\n</parameter>\n"
       "</function>\n</tool_call>",
       "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n20\n"
       "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
       "<parameter=city>\n\"Paris\"\n</parameter>\n</function>\n</tool_call>",
       "<tool_call>\n<function=add>\n<parameter=a>\n-1\n</parameter>\n<parameter=b>\n20\n"
       "</parameter>\n</function>\n</tool_call>"},
      {ToolFormat::llama3, R"({"name": "add", "parameters": {"a": 1, "b": 20}})",
       R"({"name": "get_weather", "parameters": {"city": "Paris"}})",
       R"({"name": "add", "parameters": {"a": 1, "b": 20}}; {"name": "get_weather", "parameters": {"city": "Paris"}})",
       R"({"name": "add", "parameters": {"a": -1, "b": 20}})"},
      {ToolFormat::mistral, R"([TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 20}}])",
       R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})",
       R"([TOOL_CALLS]add[ARGS]{"a": 1, "b": 20}[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})",
       R"([TOOL_CALLS]add[ARGS]{"a": -1, "b": 20})"},
      {ToolFormat::gpt_oss,
       R"(<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 1, "b": 20})",
       R"(<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"})",
       "",
       R"(<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": -1, "b": 20})"},
      {ToolFormat::deepseek,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n"
       "{\"a\": 1, \"b\": 20}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}"
       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 1, \"b\": 20}"
       "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}"
       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": -1, \"b\": 20}"
       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {ToolFormat::granite, R"(<|tool_call|>[{"name": "add", "arguments": {"a": 1, "b": 20}}])",
       R"(<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}])",
       R"(<|tool_call|>[{"name": "add", "arguments": {"a": 1, "b": 20}}, {"name": "get_weather", "arguments": {"city": "Paris"}}])",
       R"(<|tool_call|>[{"name": "add", "arguments": {"a": -1, "b": 20}}])"},
      {ToolFormat::command_r7b,
       R"(<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "add", "parameters": {"a": 1, "b": 20}}]<|END_ACTION|>)",
       R"(<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}]<|END_ACTION|>)",
       R"(<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "add", "parameters": {"a": 1, "b": 20}}, {"tool_call_id": "1", "tool_name": "get_weather", "parameters": {"city": "Paris"}}]<|END_ACTION|>)",
       R"(<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "add", "parameters": {"a": -1, "b": 20}}]<|END_ACTION|>)"},
  };
}

void expect_reads_back(ToolFormat f, const std::string& text, std::vector<std::string> names,
                       std::vector<std::string> args) {
  const ToolReply r = parse_tool_calls(f, text);
  ASSERT_TRUE(r.parsed) << text;
  ASSERT_EQ(r.calls.size(), names.size()) << text;
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(r.calls[i].name, names[i]) << text;
    EXPECT_EQ(r.calls[i].arguments, args[i]) << text;
  }
}

TEST(ToolGrammar, EachFamilysCallIsASentenceAndReadsBack) {
  const std::string add = R"({"a":1,"b":20})", weather = R"({"city":"Paris"})";
  for (const Case& c : cases()) {
    SCOPED_TRACE(tool_format_name(c.format));
    const std::string one = tool_call_grammar(c.format, tools(), false);
    const std::string many = tool_call_grammar(c.format, tools(), true);
    EXPECT_TRUE(sentence(one, c.add_call)) << one;
    EXPECT_TRUE(sentence(one, c.weather_call)) << one;
    EXPECT_TRUE(sentence(many, c.add_call));
    expect_reads_back(c.format, c.add_call, {"add"}, {add});
    expect_reads_back(c.format, c.weather_call, {"get_weather"}, {weather});
    // Arguments outside the parameters' schema, a call cut short, a tool not offered.
    EXPECT_FALSE(sentence(many, c.bad_arguments));
    EXPECT_FALSE(sentence(many, c.add_call.substr(0, c.add_call.size() - 3)));
    std::string other = c.add_call;
    other.replace(other.find("add"), 3, "sub");
    EXPECT_FALSE(sentence(many, other));
    if (!c.two_calls.empty()) {
      EXPECT_FALSE(sentence(one, c.two_calls)) << "one call only without parallel";
      EXPECT_TRUE(sentence(many, c.two_calls)) << many;
      expect_reads_back(c.format, c.two_calls, {"add", "get_weather"}, {add, weather});
    }
  }
}

TEST(ToolGrammar, ParallelCallsUpToOnePerTool) {
  const std::string call =
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 20}}\n</tool_call>";
  const std::string g = tool_call_grammar(ToolFormat::hermes, tools(), true);
  EXPECT_TRUE(sentence(g, call + "\n" + call)) << "the same tool twice";
  EXPECT_FALSE(sentence(g, call + "\n" + call + "\n" + call)) << "two tools: two calls at most";
}

TEST(ToolGrammar, NamedFunctionOnly) {
  const std::vector<ToolSpec> all = tools();
  const std::string g = tool_call_grammar(ToolFormat::hermes, {all[1]}, false);
  EXPECT_TRUE(sentence(
      g, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 20}}\n</tool_call>"));
  EXPECT_FALSE(sentence(g,
                        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                        "\"Paris\"}}\n</tool_call>"));
}

TEST(ToolGrammar, OptionalAndAbsentParameters) {
  // Qwen3-Coder's parameters one by one: the optional one may be left out or given.
  const std::string g = tool_call_grammar(ToolFormat::qwen3_coder, tools(), false);
  EXPECT_TRUE(
      sentence(g,
               "<tool_call>\n<function=get_weather>\n<parameter=city>\n\"Oslo\"\n</parameter>\n"
               "<parameter=unit>\n\"c\"\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(sentence(g,
                        "<tool_call>\n<function=get_weather>\n<parameter=unit>\n\"c\"\n"
                        "</parameter>\n</function>\n</tool_call>"))
      << "city is required";
  // A function without parameters takes any object.
  const std::string h = tool_call_grammar(ToolFormat::hermes, {{"now", "", ojson()}}, false);
  EXPECT_TRUE(sentence(h, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
}

TEST(ToolGrammar, UnsupportedSchemaNamesTheTool) {
  const std::vector<ToolSpec> bad = {
      {"f", "", ojson::parse(R"({"type": "object", "properties": {"x": {"not": {}}}})")}};
  for (ToolFormat f : {ToolFormat::none, ToolFormat::qwen3_coder}) {
    try {
      tool_call_grammar(f, bad, false);
      FAIL() << "no error for 'not'";
    } catch (const grammar::GrammarError& e) {
      EXPECT_NE(std::string(e.what()).find("tool 'f'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'not'"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(tool_call_grammar(ToolFormat::hermes, {}, false), grammar::GrammarError);
}

TEST(ToolGrammar, GenericPromptListsTheTools) {
  const std::string p = generic_tool_prompt(tools(), false);
  EXPECT_NE(p.find(R"("name":"get_weather")"), std::string::npos) << p;
  EXPECT_NE(p.find(R"("description":"The weather in a city")"), std::string::npos) << p;
  EXPECT_NE(p.find(R"("$defs":{"n")"), std::string::npos) << p;
  EXPECT_NE(p.find("{\"tool_calls\": [{\"name\": \"NAME\""), std::string::npos) << p;
}

TEST(ToolGrammar, OpenersAndMarks) {
  EXPECT_TRUE(tool_call_openers(ToolFormat::none).json_at_start);
  EXPECT_EQ(tool_call_openers(ToolFormat::hermes).markers, std::vector<std::string>{"<tool_call>"});
  EXPECT_TRUE(tool_call_openers(ToolFormat::gpt_oss).everything);
  // Every opener is one of the marks a vocabulary may hold as a token.
  for (ToolFormat f : {ToolFormat::hermes, ToolFormat::qwen3_coder, ToolFormat::llama3,
                       ToolFormat::mistral, ToolFormat::deepseek, ToolFormat::granite}) {
    const std::vector<std::string> marks = tool_call_marks(f);
    for (const std::string& o : tool_call_openers(f).markers)
      EXPECT_NE(std::find(marks.begin(), marks.end(), o), marks.end()) << o;
  }
}

}  // namespace
}  // namespace ps
