#pragma once
// A model's tool calls, read out of its reply: each family writes them in a syntax of its own
// (the one its chat template teaches), and the OpenAI API wants them as message.tool_calls with
// a name and JSON arguments. Pure functions of the text, so each syntax is tested on recorded
// replies, malformed and cut ones included: a reply whose calls do not parse is returned whole
// as content, never an error.
#include <nlohmann/json.hpp>
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

// ---- the other way: tools offered, calls asked for ------------------------------------------

// A function the client offers (OpenAI's tools[i].function).
struct ToolSpec {
  std::string name;
  std::string description;
  nlohmann::ordered_json parameters;  // a JSON Schema of the arguments object
};

// Where calls may begin in a reply of this format, so that text is held back from a stream
// from the first of them on: `markers` anywhere, and `at_start` replies that are calls as a
// whole (a JSON object first; `everything`: the reply is read as a whole, never streamed).
struct ToolOpeners {
  std::vector<std::string> markers;
  bool json_at_start = false;
  bool everything = false;
};
ToolOpeners tool_call_openers(ToolFormat f);

// The texts of the format's marks that a vocabulary may hold as single tokens (control tokens
// among them must be shown in replies for the calls to be read).
std::vector<std::string> tool_call_marks(ToolFormat f);

// GBNF whose sentences are replies that only call tools, in the format's syntax: one call of
// one of `tools` (`parallel`: one to as many as there are tools, in formats that can hold
// several), each call's arguments an instance of its function's parameters. GrammarError (naming
// the tool) for a schema the compiler does not support.
std::string tool_call_grammar(ToolFormat f, const std::vector<ToolSpec>& tools, bool parallel);

// For templates without a tool syntax: the system text that lists the tools and teaches the
// generic JSON form.
std::string generic_tool_prompt(const std::vector<ToolSpec>& tools, bool parallel);

}  // namespace ps
