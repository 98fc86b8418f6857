#pragma once
// Which chat template a model is rendered with, and rendering a conversation with it the way
// Hugging Face does (messages, add_generation_prompt, bos_token, eos_token, tools, documents,
// enable_thinking and any extra keyword arguments as template variables).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "template/template.h"

namespace ps::jinja {

// The built-in templates by name (chatml, llama3, gemma, ...), written for the families
// polystack runs; nullptr for an unknown name.
const char* builtin_template(std::string_view name);
// Their names for messages and help: "chatml, gemma, llama3, phi3".
std::string builtin_template_list();

struct ChatTemplateChoice {
  std::string source;  // the Jinja text
  std::string name;    // "chatml", "model" (the model file's own), a file name
  std::string why;     // in words: "the model file's tokenizer.chat_template"
};

// In this order: `requested` (a built-in's name, else a file to read), the model's own
// template, the built-in for its architecture (gemma for gemma3 files, which carry none),
// ChatML. UsageError for a requested file that cannot be read.
ChatTemplateChoice choose_chat_template(const std::string& requested,
                                        std::string_view model_template,
                                        std::string_view architecture);

class ChatTemplate {
 public:
  // TemplateError when the source does not parse. `strip_bos`: the tokenizer adds BOS itself,
  // so a rendered text that starts with bos_token has it removed (else the prompt would hold
  // it twice).
  ChatTemplate(ChatTemplateChoice choice, std::string bos_token, std::string eos_token,
               bool strip_bos);

  // Renders `variables` (messages, tools, ... as the template expects them; bos_token and
  // eos_token are added unless present). TemplateError on failure.
  std::string render(nlohmann::ordered_json variables, const RenderOptions& options = {}) const;

  const ChatTemplateChoice& choice() const { return choice_; }
  // Whether the template reads `enable_thinking` (a reasoning model's switch).
  bool takes_enable_thinking() const {
    return choice_.source.find("enable_thinking") != std::string::npos;
  }

 private:
  ChatTemplateChoice choice_;
  Template tmpl_;
  std::string bos_, eos_;
  bool strip_bos_;
};

}  // namespace ps::jinja
