// libFuzzer target for the chat template engine (src/template): the input is a template's
// source, parsed and rendered for a conversation with tools, under small limits on steps,
// nesting and output. A TemplateError is the normal outcome of a bad template; any other
// exception, a crash, a sanitizer report or a hang is a finding.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "template/template.h"

namespace {

const nlohmann::ordered_json& variables() {
  static const nlohmann::ordered_json v = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Grüße {{ x }} 東京"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "n": 1.5}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"t\": 21}"},
      {"role": "user", "content": [{"type": "text", "text": "and?"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false
  })");
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  ps::jinja::RenderOptions limits;
  limits.max_output = 1 << 20;
  limits.max_steps = 200000;
  limits.max_depth = 200;
  limits.now = 0;
  try {
    ps::jinja::Template t(source);
    (void)t.render(variables(), limits);
  } catch (const ps::TemplateError&) {
  }
  return 0;
}
