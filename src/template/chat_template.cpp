#include "template/chat_template.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace ps::jinja {
namespace {

// ChatML, as Qwen, SmolLM and many fine-tunes use it.
constexpr const char* kChatML = R"JINJA({%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + (message['content'] if message['content'] is string else '') + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- endif -%})JINJA";

// Llama 3's header turns.
constexpr const char* kLlama3 = R"JINJA({{- bos_token -}}
{%- for message in messages -%}
{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + (message['content'] | trim) + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%})JINJA";

// Gemma's turns: user and model only; a system message opens the first user turn.
constexpr const char* kGemma = R"JINJA({{- bos_token -}}
{%- set ns = namespace(system='') -%}
{%- if messages and messages[0]['role'] == 'system' -%}
{%- set ns.system = messages[0]['content'] + '\n\n' -%}
{%- set turns = messages[1:] -%}
{%- else -%}
{%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
{%- if message['role'] not in ['user', 'assistant', 'model'] -%}
{{- raise_exception("Gemma's turns are user and assistant (got '" + message['role'] + "')") -}}
{%- endif -%}
{{- '<start_of_turn>' + ('model' if message['role'] in ['assistant', 'model'] else 'user') + '\n' -}}
{{- (ns.system if loop.first else '') + (message['content'] | trim) + '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if not turns and ns.system -%}
{{- '<start_of_turn>user\n' + ns.system | trim + '<end_of_turn>\n' -}}
{%- endif -%}
{%- if add_generation_prompt -%}
{{- '<start_of_turn>model\n' -}}
{%- endif -%})JINJA";

// Phi-3's tags.
constexpr const char* kPhi3 = R"JINJA({%- for message in messages -%}
{{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|assistant|>\n' -}}
{%- else -%}
{{- eos_token -}}
{%- endif -%})JINJA";

struct Builtin {
  const char* name;
  const char* source;
};
constexpr Builtin kBuiltins[] = {
    {"chatml", kChatML}, {"gemma", kGemma}, {"llama3", kLlama3}, {"phi3", kPhi3}};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("cannot read chat template file {}", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw UsageError(fmt::format("cannot read chat template file {}", path));
  std::string text = ss.str();
  if (text.size() > (4u << 20))
    throw UsageError(fmt::format("chat template file {} is larger than 4 MiB", path));
  return text;
}

}  // namespace

const char* builtin_template(std::string_view name) {
  for (const Builtin& b : kBuiltins)
    if (name == b.name) return b.source;
  return nullptr;
}

std::string builtin_template_list() {
  std::string out;
  for (const Builtin& b : kBuiltins) out += (out.empty() ? "" : ", ") + std::string(b.name);
  return out;
}

ChatTemplateChoice choose_chat_template(const std::string& requested,
                                        std::string_view model_template,
                                        std::string_view architecture) {
  if (!requested.empty()) {
    if (const char* src = builtin_template(requested))
      return {src, requested, "built in, named by --chat-template"};
    if (requested.find('/') == std::string::npos && requested.find('.') == std::string::npos) {
      throw UsageError(fmt::format("unknown chat template '{}': a built-in ({}) or a file",
                                   requested, builtin_template_list()));
    }
    return {read_text_file(requested), requested, "a file named by --chat-template"};
  }
  if (!model_template.empty())
    return {std::string(model_template), "model", "the model file's tokenizer.chat_template"};
  if (architecture.starts_with("gemma"))
    return {
        kGemma, "gemma",
        fmt::format("built in: the model file has none and its architecture is {}", architecture)};
  if (architecture == "phi3")
    return {kPhi3, "phi3", "built in: the model file has none and its architecture is phi3"};
  return {kChatML, "chatml", "built in: the model file has none"};
}

ChatTemplate::ChatTemplate(ChatTemplateChoice choice, std::string bos_token, std::string eos_token,
                           bool strip_bos)
    : choice_(std::move(choice)),
      tmpl_(choice_.source),
      bos_(std::move(bos_token)),
      eos_(std::move(eos_token)),
      strip_bos_(strip_bos) {}

std::string ChatTemplate::render(nlohmann::ordered_json variables,
                                 const RenderOptions& options) const {
  if (!variables.is_object()) throw TemplateError("template variables must be a JSON object");
  if (!variables.contains("bos_token")) variables["bos_token"] = bos_;
  if (!variables.contains("eos_token")) variables["eos_token"] = eos_;
  if (!variables.contains("add_generation_prompt")) variables["add_generation_prompt"] = true;
  std::string text = tmpl_.render(variables, options);
  if (strip_bos_ && !bos_.empty() && text.starts_with(bos_)) text.erase(0, bos_.size());
  return text;
}

}  // namespace ps::jinja
