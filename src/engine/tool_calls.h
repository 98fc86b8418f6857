#pragma once
// A model's tool calls, read out of its reply: each family writes them in a syntax of its own
// (the one its chat template teaches), and the OpenAI API wants them as message.tool_calls with
// a name and JSON arguments. Pure functions of the text, so each syntax is tested on recorded
// replies, malformed and cut ones included: a reply whose calls do not parse is returned whole
// as content, never an error.
#include <string>
#include <string_view>
#include <vector>

namespace ps {

enum class ToolFormat {
  none,         // the template has no tool syntax: the generic JSON form
  hermes,       // Hermes, Qwen 2.5, Qwen 3: <tool_call>{"name", "arguments"}</tool_call>
  qwen3_coder,  // <tool_call><function=NAME><parameter=KEY>VALUE</parameter></function>
  llama3,       // Llama 3.x: {"name", "parameters"} as the reply, or <|python_tag|>...
  mistral,      // Mistral, Nemo: [TOOL_CALLS][{"name", "arguments", "id"}] or NAME[ARGS]{...}
  gpt_oss,      // <|channel|>commentary to=functions.NAME ... <|message|>{...}<|call|>
  deepseek,  // DeepSeek R1/V3: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ```json ...```
  granite,      // Granite: <|tool_call|>[{"name", "arguments"}]
  command_r7b,  // Command R7B: <|START_ACTION|>[{"tool_name", "parameters"}]<|END_ACTION|>
};
const char* tool_format_name(ToolFormat f);

// The syntax a chat template teaches, from the marks in its source (none when it has none).
ToolFormat detect_tool_format(std::string_view template_source);

struct ToolCall {
  std::string id;  // the model's own id where its syntax has one, else empty
  std::string name;
  std::string arguments;  // a JSON object, as compact text
};

struct ToolReply {
  std::string content;  // the text outside the calls (the whole reply when parsed is false)
  std::vector<ToolCall> calls;
  bool parsed = true;  // false: calls were begun but did not parse
};

// The calls in a finished reply. The generic form (ToolFormat::none) is a reply that is a JSON
// object {"tool_calls": [{"name", "arguments"}, ...]} or {"tool_call": {...}}, or
// {"response": "..."} for an answer in words.
ToolReply parse_tool_calls(ToolFormat f, std::string_view text);

}  // namespace ps
