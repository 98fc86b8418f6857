// A chat reply read as it streams (engine/reply_reader.h): cut into pieces at every place, it
// gives the same thinking, content and calls as read whole; plain text is not held back, text
// from a call's first mark on is; calls that do not parse come back as content.
#include "engine/reply_reader.h"

#include <gtest/gtest.h>

namespace ps {
namespace {

struct Whole {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  std::string sent_early;  // content given before the last piece
};

Whole read(ReplyReader::Options o, const std::vector<std::string>& pieces) {
  ReplyReader r(o);
  Whole w;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const bool last = i + 1 == pieces.size();
    ReplyReader::Parts p = r.feed(pieces[i], last);
    w.reasoning += p.reasoning;
    w.content += p.content;
    if (!last) w.sent_early += p.content;
    if (!p.calls.empty()) {
      EXPECT_TRUE(last) << "calls come with the last piece";
      w.calls = p.calls;
    }
  }
  return w;
}

// The reply read whole, and cut in two and in three at every place, reads the same.
Whole read_every_way(ReplyReader::Options o, const std::string& text) {
  const Whole whole = read(o, {text});
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); b += 3) {
      const Whole cut = read(o, {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
      EXPECT_EQ(cut.reasoning, whole.reasoning) << a << " " << b;
      EXPECT_EQ(cut.content, whole.content) << a << " " << b;
      EXPECT_EQ(cut.calls.size(), whole.calls.size()) << a << " " << b;
    }
  }
  return whole;
}

TEST(ReplyReader, HermesCallAfterText) {
  const ReplyReader::Options o{false, false, true, ToolFormat::hermes};
  const std::string text =
      "Let me look. <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>";
  const Whole w = read_every_way(o, text);
  EXPECT_EQ(w.content, "Let me look. ");
  ASSERT_EQ(w.calls.size(), 1u);
  EXPECT_EQ(w.calls[0].name, "f");
  EXPECT_EQ(w.calls[0].arguments, R"({"x":1})");
  // The text before the mark streams; the mark's beginning is held until it is told apart.
  const Whole parts = read(o, {"Let me look. <tool",
                               "_call>\n{\"name\": \"f\", \"arguments\": "
                               "{}}\n</tool_call>"});
  EXPECT_EQ(parts.sent_early, "Let me look. ");
  const Whole lookalike = read(o, {"a <tool", "box> b", " c"});
  EXPECT_EQ(lookalike.sent_early, "a <toolbox> b");
  EXPECT_EQ(lookalike.content, "a <toolbox> b c");
  EXPECT_TRUE(lookalike.calls.empty());
}

TEST(ReplyReader, GenericJsonReplyIsReadWhole) {
  const ReplyReader::Options o{false, false, true, ToolFormat::none};
  const Whole w =
      read_every_way(o,
                     "  {\"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", "
                     "\"arguments\": {\"y\": [1]}}]}");
  EXPECT_EQ(w.content, "");
  ASSERT_EQ(w.calls.size(), 2u);
  EXPECT_EQ(w.calls[1].arguments, R"({"y":[1]})");
  // An answer in words: streamed as it comes, or taken out of the generic {"response"}.
  const Whole words = read(o, {"Hello", " there"});
  EXPECT_EQ(words.sent_early, "Hello");
  EXPECT_EQ(words.content, "Hello there");
  EXPECT_EQ(read(o, {"{\"response\": \"Hi\"}"}).content, "Hi");
  // A JSON object that is neither: the whole text, as content.
  EXPECT_EQ(read(o, {"{\"a\":", " 1}"}).content, "{\"a\": 1}");
}

TEST(ReplyReader, BrokenCallsComeBackAsContent) {
  const ReplyReader::Options o{false, false, true, ToolFormat::hermes};
  const std::string cut = "Sure. <tool_call>\n{\"name\": \"f\", \"argum";
  const Whole w = read_every_way(o, cut);
  EXPECT_EQ(w.content, cut);
  EXPECT_TRUE(w.calls.empty());
}

TEST(ReplyReader, ThinkingThenCall) {
  const ReplyReader::Options o{true, true, true, ToolFormat::hermes};
  const Whole w = read_every_way(
      o,
      "weather needs a call</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": "
      "{\"c\": \"Oslo\"}}\n</tool_call>");
  EXPECT_EQ(w.reasoning, "weather needs a call");
  EXPECT_EQ(w.content, "\n\n");
  ASSERT_EQ(w.calls.size(), 1u);
  EXPECT_EQ(w.calls[0].arguments, R"({"c":"Oslo"})");
}

TEST(ReplyReader, GptOssChannels) {
  const ReplyReader::Options o{true, false, true, ToolFormat::gpt_oss};
  Whole w = read_every_way(
      o,
      "<|channel|>analysis<|message|>The user wants Oslo's weather.<|end|><|start|>assistant"
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
      "{\"city\": \"Oslo\"}");
  EXPECT_EQ(w.reasoning, "The user wants Oslo's weather.");
  EXPECT_EQ(w.content, "");
  ASSERT_EQ(w.calls.size(), 1u);
  EXPECT_EQ(w.calls[0].name, "get_weather");
  EXPECT_EQ(w.calls[0].arguments, R"({"city":"Oslo"})");
  w = read_every_way(o,
                     "<|channel|>analysis<|message|>Simple greeting.<|end|><|start|>assistant"
                     "<|channel|>final<|message|>Hello there!");
  EXPECT_EQ(w.reasoning, "Simple greeting.");
  EXPECT_EQ(w.content, "Hello there!");
  EXPECT_TRUE(w.calls.empty());
  // The thinking streams as it comes, the end mark held back until it is told apart.
  const Whole parts = read(o, {"<|channel|>analysis<|message|>Think", "ing<|e", "nd|><|start|>",
                               "assistant<|channel|>final<|message|>Hi", "!"});
  EXPECT_EQ(parts.reasoning, "Thinking");
  EXPECT_EQ(parts.sent_early, "Hi");
  EXPECT_EQ(parts.content, "Hi!");
  // Without tools a call message is text; a reply without the markup is all answer.
  const ReplyReader::Options no_tools{true, false, false, ToolFormat::gpt_oss};
  w = read(no_tools, {"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}"});
  EXPECT_TRUE(w.calls.empty());
  EXPECT_EQ(w.content, "{}");
  w = read(no_tools, {"Plain", " words"});
  EXPECT_EQ(w.sent_early, "Plain");
  EXPECT_EQ(w.content, "Plain words");
  // A call whose arguments do not parse comes back as content.
  w = read(o, {"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":"});
  EXPECT_TRUE(w.calls.empty());
  EXPECT_NE(w.content.find("to=functions.f"), std::string::npos) << w.content;
}

TEST(ReplyReader, NoToolsNoHolding) {
  const ReplyReader::Options o{false, false, false, ToolFormat::hermes};
  const Whole w = read(o, {"<tool_call>", "{}", "x"});
  EXPECT_EQ(w.sent_early, "<tool_call>{}");
  EXPECT_TRUE(w.calls.empty());
}

}  // namespace
}  // namespace ps
