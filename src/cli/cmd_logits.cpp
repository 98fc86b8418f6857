// Writes the logits of every position for a token sequence: the hook the numpy reference
// tests compare against.
#include <fmt/format.h>

#include <cstdio>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"

namespace ps::cli {

Action add_logits(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "logits", "Write the logits of every position as float32 (n_tokens x n_vocab)");
  struct Opts {
    ModelFlags mf;
    std::string tokens, out;
  };
  auto o = std::make_shared<Opts>();
  add_model_flags(cmd, o->mf, false);
  cmd->add_option("--tokens", o->tokens, "Token ids separated by spaces")->required();
  cmd->add_option("-o,--out", o->out, "Output file")->required();
  return [o] {
    std::vector<int32_t> ids;
    std::istringstream in(o->tokens);
    std::string word;
    while (in >> word) {
      char* end = nullptr;
      const long v = std::strtol(word.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || v > INT32_MAX)
        throw UsageError(fmt::format("--tokens: '{}' is not a token id", word));
      ids.push_back(int32_t(v));
    }
    check_device_flag(o->mf);
    const ModelChoice choice = resolve_model_path(o->mf);
    if (choice.origin != "-m") fmt::print(stderr, "polystack: model: {}\n", choice.origin);
    auto model = LoadedModel::load(choice.path, /*with_tokenizer=*/false);
    ModelContext s(model, o->mf.context);
    print_device_choice(s);
    const std::vector<float> logits = s.eval(ids, /*all_logits=*/true);
    std::FILE* f = std::fopen(o->out.c_str(), "wb");
    if (!f) throw UsageError(fmt::format("{}: cannot write", o->out));
    const size_t n = std::fwrite(logits.data(), sizeof(float), logits.size(), f);
    if (std::fclose(f) != 0 || n != logits.size())
      throw UsageError(fmt::format("{}: write failed", o->out));
    fmt::print(stderr, "polystack: wrote {} x {} logits to {}\n", ids.size(),
               model->model->params().n_vocab, o->out);
    return 0;
  };
}

}  // namespace ps::cli
