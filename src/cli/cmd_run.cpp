#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace ps::cli {
namespace {

std::string describe(const LoadedModel& m) {
  const ModelParams& p = m.model->params();
  return fmt::format("{} ({}, {:.2f} M params, {:.1f} MiB of weights, {} layers, context {})",
                     p.name.empty() ? "unnamed" : p.name, p.architecture, double(p.n_params) / 1e6,
                     double(p.weight_bytes) / (1 << 20), p.n_layer, p.n_ctx_train);
}

}  // namespace

Action add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  struct Opts {
    ModelFlags mf;
    std::string prompt, file;
    int n_predict = -1;
    int64_t seed = -1;
    SamplerParams sp;
    bool ignore_eos = false, verbose = false;
  };
  auto o = std::make_shared<Opts>();
  add_model_flags(cmd, o->mf, false);
  auto* p = cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  auto* f = cmd->add_option("-f,--file", o->file, "Read the prompt from a file");
  p->excludes(f);
  cmd->add_option("-n,--n-predict", o->n_predict,
                  "Tokens to generate (-1: until end of text or a full context)")
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("-s,--seed", o->seed, "Random seed (-1: random)");
  cmd->add_option("--temp", o->sp.temp, "Temperature (0: greedy, deterministic)");
  cmd->add_option("--top-k", o->sp.top_k, "Keep the k most likely tokens (0: off)");
  cmd->add_option("--top-p", o->sp.top_p, "Nucleus sampling threshold (1: off)");
  cmd->add_option("--min-p", o->sp.min_p, "Drop tokens below min-p x the top probability");
  cmd->add_option("--repeat-penalty", o->sp.repeat_penalty, "Penalty for repeated tokens (1: off)");
  cmd->add_option("--repeat-last-n", o->sp.repeat_last_n, "Tokens the repeat penalty looks back");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past the end-of-text token");
  cmd->add_flag("-v,--verbose", o->verbose, "Also print where each layer runs and why");

  return [o, p, f] {
    const std::string prompt = *f ? read_file_bytes(o->file) : o->prompt;
    const ModelChoice choice = resolve_model_path(o->mf);
    const std::string& path = choice.path;
    if (choice.origin != "-m") fmt::print(stderr, "polystack: model: {}\n", choice.origin);
    check_device_flag(o->mf);
    auto model = LoadedModel::load(path);
    // The device first: a device that fails its self-check ends the command in one line. One
    // sequence on the engine that `serve` runs.
    Engine engine(model, o->mf.context, /*n_slots=*/1, /*max_queue=*/0);
    const ModelContext& ctx = engine.context();
    fmt::print(stderr, "polystack: loaded {} in {:.0f} ms: {}\n", path, model->load_seconds * 1e3,
               describe(*model));
    const DeviceInfo& dev = ctx.device().info();
    print_device_choice(ctx);
    if (o->verbose) {
      const ModelParams& mp = model->model->params();
      fmt::print(stderr, "polystack: model features: {}\n",
                 mp.features.empty() ? std::string("none beyond the plain " + mp.architecture)
                                     : fmt::format("{}", fmt::join(mp.features, "; ")));
      print_plan_detail(ctx);
    }

    CompletionRequest req;
    req.sampling = o->sp;
    req.sampling.seed = o->seed >= 0 ? uint64_t(o->seed) : std::random_device{}();
    req.max_tokens = o->n_predict;
    req.ignore_eos = o->ignore_eos;
    const Tokenizer& tok = *model->tokenizer;
    req.prompt = tok.encode(prompt, true, true);
    if (req.prompt.empty()) throw UsageError("the prompt is empty and the model adds no BOS token");
    if (int64_t(req.prompt.size()) >= ctx.n_ctx())
      throw UsageError(fmt::format("the prompt has {} tokens but the context holds only {} (-c)",
                                   req.prompt.size(), ctx.n_ctx()));
    fmt::print(stderr, "polystack: context {}, prompt {} tokens, seed {}, threads {}\n",
               ctx.n_ctx(), req.prompt.size(), req.sampling.seed, ctx.device().threads());
    const size_t n_prompt = req.prompt.size();
    const std::shared_ptr<Stream> events = engine.submit(std::move(req));
    if (!events) throw BackendError("the engine refused the request");
    StreamEvent done;
    for (;;) {
      std::optional<StreamEvent> e = events->pop(std::chrono::milliseconds(1000));
      if (!e) continue;
      if (!e->text.empty()) {
        std::fwrite(e->text.data(), 1, e->text.size(), stdout);
        std::fflush(stdout);
      }
      if (e->done) {
        done = std::move(*e);
        break;
      }
    }
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (done.finish_reason == "error") throw BackendError(done.error);
    const double prompt_s = done.prompt_seconds, gen_s = done.generation_seconds;
    const int n_eval = done.decode_steps;
    fmt::print(stderr, "polystack: prompt: {} tokens in {:.1f} ms ({:.1f} tokens/s) on {}\n",
               n_prompt, prompt_s * 1e3, double(n_prompt) / prompt_s, dev.id);
    fmt::print(stderr,
               "polystack: generation: {} tokens in {:.1f} ms ({:.1f} tokens/s over {} "
               "decode steps) on {}, stopped at {}\n",
               done.completion_tokens, gen_s * 1e3, n_eval > 0 ? double(n_eval) / gen_s : 0.0,
               n_eval, dev.id, done.stop_detail);
    if (o->verbose && n_eval > 0 && done.transfer_bytes > 0)
      fmt::print(stderr,
                 "polystack: copies between devices: {} per decode step in {:.3f} ms ({:.2f} % of "
                 "the step)\n",
                 human_bytes(done.transfer_bytes / size_t(n_eval)),
                 done.transfer_seconds * 1e3 / n_eval, 100.0 * done.transfer_seconds / gen_s);
    return 0;
  };
}

}  // namespace ps::cli
