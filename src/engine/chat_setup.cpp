#include "engine/chat_setup.h"

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ps {

std::unique_ptr<jinja::ChatTemplate> model_chat_template(const LoadedModel& model,
                                                         const std::string& requested) {
  const gguf::Value* t = model.file->find("tokenizer.chat_template");
  jinja::ChatTemplateChoice choice = jinja::choose_chat_template(
      requested, t && t->type == gguf::ValueType::STRING ? t->str : std::string_view(),
      model.model->params().architecture);
  const Tokenizer& tok = *model.tokenizer;
  const std::string why = choice.why;
  try {
    return std::make_unique<jinja::ChatTemplate>(
        std::move(choice), tok.bos() >= 0 ? tok.token_to_piece(tok.bos(), true) : "",
        tok.eos() >= 0 ? tok.token_to_piece(tok.eos(), true) : "", tok.adds_bos());
  } catch (const TemplateError& e) {
    throw UsageError(fmt::format(
        "the chat template ({}) cannot be used: {}; name another with --chat-template ({} or a "
        "file)",
        why, jinja::describe(e), jinja::builtin_template_list()));
  }
}

std::string describe_chat_template(const jinja::ChatTemplate& t,
                                   const std::optional<bool>& enable_thinking) {
  std::string s = fmt::format("{} ({})", t.choice().name, t.choice().why);
  if (t.takes_enable_thinking())
    s += fmt::format(", thinking {}", enable_thinking ? (*enable_thinking ? "on" : "off")
                                                      : "as the template defaults");
  return s;
}

}  // namespace ps
