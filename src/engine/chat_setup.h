#pragma once
// The chat template a loaded model's conversations are rendered with: the one asked for
// (--chat-template NAME|FILE), else the file's own, else the built-in for its architecture,
// with bos_token and eos_token from its vocabulary. `chat` and `serve` both start here.
#include <memory>
#include <string>

#include "engine/model_context.h"
#include "template/chat_template.h"

namespace ps {

// UsageError (one line, naming where the template came from) when it does not parse.
std::unique_ptr<jinja::ChatTemplate> model_chat_template(const LoadedModel& model,
                                                         const std::string& requested);

// "model (the model file's tokenizer.chat_template)", and ", thinking on|off|as the template
// defaults" for templates that read enable_thinking.
std::string describe_chat_template(const jinja::ChatTemplate& t,
                                   const std::optional<bool>& enable_thinking);

}  // namespace ps
