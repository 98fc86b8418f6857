// `polystack template`: renders a chat template for a conversation and prints exactly the
// text a model would be given, for users checking a template and for the tests that hold the
// template engine to jinja2.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>

#include "cli/commands.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ps::cli {
namespace {

// SOURCE_DATE_EPOCH as a time, when set (strftime_now's clock); UsageError when malformed.
std::optional<std::time_t> source_date_epoch() {
  const char* env = std::getenv("SOURCE_DATE_EPOCH");
  if (!env || !*env) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long t = std::strtoll(env, &end, 10);
  if (errno != 0 || *end != '\0' || t < 0)
    throw UsageError(
        fmt::format("SOURCE_DATE_EPOCH must be seconds since the epoch, not '{}'", env));
  return std::time_t(t);
}

}  // namespace

Action add_template(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "template", "Render a chat template for a conversation and print the exact text");
  struct Opts {
    std::string model, file, name, messages, bos, eos;
  };
  auto o = std::make_shared<Opts>();
  auto* m = cmd->add_option("-m,--model", o->model, "GGUF file whose template and BOS/EOS to use");
  auto* f = cmd->add_option("--chat-template-file", o->file, "A Jinja template file");
  auto* n =
      cmd->add_option("--chat-template", o->name,
                      "A built-in template (" + jinja::builtin_template_list() + ") or a file");
  cmd->add_option("--messages", o->messages,
                  "JSON file: an object with messages and optionally add_generation_prompt "
                  "(default true), tools and other template variables")
      ->required();
  auto* bos =
      cmd->add_option("--bos", o->bos, "bos_token's text (default: the model's, else empty)");
  auto* eos =
      cmd->add_option("--eos", o->eos, "eos_token's text (default: the model's, else empty)");
  f->excludes(n);
  return [o, m, f, n, bos, eos] {
    if (!*m && !*f && !*n)
      throw UsageError(
          "template needs -m MODEL, --chat-template-file FILE or --chat-template NAME");
    nlohmann::ordered_json vars;
    try {
      vars = nlohmann::ordered_json::parse(read_file_bytes(o->messages));
    } catch (const nlohmann::json::parse_error& e) {
      throw UsageError(fmt::format("{}: not JSON (at byte {})", o->messages, e.byte));
    }
    if (!vars.is_object() || !vars.contains("messages"))
      throw UsageError(fmt::format("{}: expected an object with \"messages\"", o->messages));

    std::string model_template, architecture, model_bos, model_eos;
    if (*m) {
      auto file = gguf::File::open(o->model);
      model_template = file->get_string("tokenizer.chat_template");
      architecture = file->get_string("general.architecture");
      auto tok = Tokenizer::from_gguf(*file);
      if (tok->bos() >= 0) model_bos = tok->token_to_piece(tok->bos(), true);
      if (tok->eos() >= 0) model_eos = tok->token_to_piece(tok->eos(), true);
    }
    jinja::ChatTemplateChoice choice =
        jinja::choose_chat_template(*f ? o->file : o->name, model_template, architecture);
    std::string text;
    try {
      // The text as the template renders it: the BOS the tokenizer would add is not stripped,
      // so what is printed is what jinja2 prints.
      jinja::ChatTemplate t(std::move(choice), *bos ? o->bos : model_bos, *eos ? o->eos : model_eos,
                            false);
      jinja::RenderOptions ro;
      ro.now = source_date_epoch();
      text = t.render(vars, ro);
    } catch (const TemplateError& e) {
      throw Error(e.raised() ? fmt::format("the template raised an exception: {}", e.message())
                             : jinja::describe(e));
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  };
}

}  // namespace ps::cli
