#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/model_context.h"
#include "gguf/gguf.h"

namespace ps::cli {
namespace {

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80         ? 1
                       : (c >> 5) == 6  ? 2
                       : (c >> 4) == 14 ? 3
                       : (c >> 3) == 30 ? 4
                                        : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    i += len;
  }
  return true;
}

// Shows a piece with non-printable bytes escaped, so one token stays on one line; a piece that
// is only part of a UTF-8 character (byte tokens) shows its bytes as \xNN.
std::string escape(const std::string& s) {
  std::string out;
  const bool utf8 = valid_utf8(s);
  for (unsigned char c : s) {
    if (!utf8 && c >= 0x80)
      out += fmt::format("\\x{:02x}", c);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\'')
      out += "\\'";
    else if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += char(c);
  }
  return out;
}

}  // namespace

Action add_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Turn text into token ids with a model's tokenizer");
  struct Opts {
    std::string model, prompt, file;
    bool ids = false, no_special = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model,
                  "GGUF file, a vocab-only file is enough (default: as run finds one)");
  auto* p = cmd->add_option("-p,--prompt", o->prompt, "Text to tokenize");
  auto* f = cmd->add_option("-f,--file", o->file, "Tokenize this file's exact bytes");
  p->excludes(f);
  cmd->add_flag("--ids", o->ids, "Print only the ids, on one line");
  cmd->add_flag("--no-special", o->no_special,
                "Add no BOS/EOS and treat special-token text as plain text");
  return [o, p, f] {
    if (!*p && !*f) throw UsageError("tokenize needs -p TEXT or -f FILE");
    const std::string text = *f ? read_file_bytes(o->file) : o->prompt;
    ModelFlags mf;
    mf.model = o->model;
    const ModelChoice choice = resolve_model_path(mf);
    if (choice.origin != "-m") fmt::print(stderr, "polystack: model: {}\n", choice.origin);
    auto file = gguf::File::open(choice.path);
    auto tok = Tokenizer::from_gguf(*file);
    const auto ids = tok->encode(text, !o->no_special, !o->no_special);
    if (o->ids) {
      fmt::print("{}\n", fmt::join(ids, " "));
      return 0;
    }
    for (int32_t id : ids) fmt::print("{:>6} '{}'\n", id, escape(tok->token_to_piece(id, true)));
    return 0;
  };
}

}  // namespace ps::cli
