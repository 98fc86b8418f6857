#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/chat_setup.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
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

// The prompt from stdin, whole.
std::string read_stdin() {
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n == 0) return text;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw UsageError(fmt::format("stdin: cannot read the prompt: {}", std::strerror(errno)));
    text.append(buf, size_t(n));
  }
}

// Ctrl-C stops the generation: the first ends it cleanly (the text so far, its timings, exit
// 130); the disposition is reset, so a second one ends the process at once.
std::atomic<bool> g_interrupted{false};
extern "C" void on_run_sigint(int) { g_interrupted = true; }

void catch_sigint() {
  struct sigaction sa {};
  sa.sa_handler = on_run_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
}

// "threads 2" for the CPU's share of the work: all of it, or its layers beside a GPU.
std::string threads_text(const ModelContext& ctx) {
  const PlacementPlan& plan = ctx.plan();
  const int cpu = int(plan.devices.size()) - 1;
  const int threads = ctx.devices().back()->threads();
  if (ctx.device().info().api == Api::Cpu) return fmt::format("threads {}", threads);
  if (plan.need.back() == 0)
    return fmt::format("no CPU threads (everything on {})", ctx.device().info().id);
  return fmt::format("threads {} for the CPU's share ({})", threads, plan.units_text(cpu));
}

}  // namespace

Action add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  struct Opts {
    ModelFlags mf;
    std::string prompt, file, chat_template, reasoning, system;
    int n_predict = -1;
    int64_t seed = -1;
    SamplerParams sp;
    bool ignore_eos = false, verbose = false, raw = false;
    GrammarFlags grammar;
  };
  auto o = std::make_shared<Opts>();
  add_model_flags(cmd, o->mf, false);
  auto* p = cmd->add_option("-p,--prompt", o->prompt,
                            "Prompt text (-: read it from stdin, as when no -p is given and "
                            "stdin is not a terminal)");
  auto* f = cmd->add_option("-f,--file", o->file, "Read the prompt from a file");
  p->excludes(f);
  auto* raw = cmd->add_flag("--no-template,--raw", o->raw,
                            "Send the prompt as written, not as one user turn through the "
                            "model's chat template");
  add_chat_template_flags(cmd, o->chat_template, o->reasoning);
  auto* sys = cmd->add_option("--system", o->system,
                              "A system message before the prompt (with a chat template)");
  raw->excludes(sys);
  raw->excludes(cmd->get_option("--chat-template"));
  raw->excludes(cmd->get_option("--reasoning"));
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
  add_grammar_flags(cmd, o->grammar);
  cmd->add_flag("-v,--verbose", o->verbose, "Also print where each layer runs and why");

  return [o, p, f] {
    // A grammar's mistakes are told before the model loads.
    const std::shared_ptr<const grammar::Grammar> grammar = load_grammar(o->grammar);
    // The prompt: -p TEXT, -p - or -f - (stdin), -f FILE, or stdin when it is not a terminal.
    std::string prompt;
    if ((*p && o->prompt == "-") || (*f && o->file == "-")) {
      prompt = read_stdin();
    } else if (*f) {
      prompt = read_file_bytes(o->file);
    } else if (*p) {
      prompt = o->prompt;
    } else if (isatty(STDIN_FILENO)) {
      throw UsageError(
          "no prompt: give one with -p TEXT, -f FILE or on stdin (echo TEXT | polystack run); "
          "polystack chat starts a conversation");
    } else {
      prompt = read_stdin();
      if (prompt.empty())
        throw UsageError("no prompt: stdin was empty (give one with -p TEXT or -f FILE)");
    }
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
    print_device_choice(ctx, o->verbose);
    fmt::print(stderr,
               "polystack: warm-up: {:.1f} ms (one token through the model: the devices' "
               "first-use work, such as packing weights, done before the prompt)\n",
               engine.warm_up_seconds() * 1e3);
    if (o->verbose) {
      const ModelParams& mp = model->model->params();
      fmt::print(stderr, "polystack: model features: {}\n",
                 mp.features.empty() ? std::string("none beyond the plain " + mp.architecture)
                                     : fmt::format("{}", fmt::join(mp.features, "; ")));
      print_plan_detail(ctx);
    }

    // An instruction-tuned model answers a prompt given as a user turn, as llama-cli does.
    const gguf::Value* own = model->file->find("tokenizer.chat_template");
    const bool has_template = own && own->type == gguf::ValueType::STRING && !own->str.empty();
    std::string text = prompt;
    if (!o->raw && (has_template || !o->chat_template.empty())) {
      std::unique_ptr<jinja::ChatTemplate> tmpl = model_chat_template(*model, o->chat_template);
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
      messages.push_back({{"role", "user"}, {"content", prompt}});
      nlohmann::ordered_json vars = {{"messages", messages},
                                     {"tools", nullptr},
                                     {"documents", nullptr},
                                     {"add_generation_prompt", true}};
      std::optional<bool> thinking;
      if (!o->reasoning.empty()) vars["enable_thinking"] = *(thinking = o->reasoning == "on");
      try {
        text = tmpl->render(std::move(vars));
      } catch (const TemplateError& e) {
        throw Error(fmt::format("the chat template failed: {}",
                                e.raised() ? e.message() : jinja::describe(e)));
      }
      fmt::print(stderr,
                 "polystack: prompt: one user turn through the chat template {}; --no-template "
                 "sends it as written\n",
                 describe_chat_template(*tmpl, thinking));
    } else {
      if (!o->system.empty())
        throw UsageError(
            "--system needs a chat template, and the model has none "
            "(name one with --chat-template)");
      fmt::print(stderr, "polystack: prompt: as written ({})\n",
                 o->raw ? "--no-template" : "the model has no chat template");
    }

    CompletionRequest req;
    req.sampling = o->sp;
    req.sampling.seed = o->seed >= 0 ? uint64_t(o->seed) : std::random_device{}();
    req.max_tokens = o->n_predict;
    req.ignore_eos = o->ignore_eos;
    req.grammar = grammar;
    const Tokenizer& tok = *model->tokenizer;
    req.prompt = tok.encode(text, true, true);
    if (req.prompt.empty()) throw UsageError("the prompt is empty and the model adds no BOS token");
    if (int64_t(req.prompt.size()) >= ctx.n_ctx())
      throw UsageError(fmt::format("the prompt has {} tokens but the context holds only {} (-c)",
                                   req.prompt.size(), ctx.n_ctx()));
    fmt::print(stderr, "polystack: context {}, prompt {} tokens, seed {}, {}\n", ctx.n_ctx(),
               req.prompt.size(), req.sampling.seed, threads_text(ctx));
    const size_t n_prompt = req.prompt.size();
    g_interrupted = false;
    catch_sigint();
    const std::shared_ptr<Stream> events = engine.submit(std::move(req));
    if (!events) throw BackendError("the engine refused the request");
    StreamEvent done;
    bool cancelled = false;
    for (;;) {
      if (!cancelled && g_interrupted) {
        engine.cancel(events);
        cancelled = true;
      }
      std::optional<StreamEvent> e = events->pop(std::chrono::milliseconds(50));
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
    std::signal(SIGINT, SIG_DFL);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (done.finish_reason == "error") throw BackendError(done.error);
    const bool stopped = done.finish_reason == "cancelled";
    const double prompt_s = done.prompt_seconds, gen_s = done.generation_seconds;
    const int n_eval = done.decode_steps;
    fmt::print(stderr, "polystack: prompt: {} tokens in {:.1f} ms ({:.1f} tokens/s) on {}\n",
               n_prompt, prompt_s * 1e3, prompt_s > 0 ? double(n_prompt) / prompt_s : 0.0, dev.id);
    fmt::print(stderr,
               "polystack: generation: {} tokens in {:.1f} ms ({:.1f} tokens/s over {} "
               "decode steps) on {}, {}\n",
               done.completion_tokens, gen_s * 1e3, n_eval > 0 ? double(n_eval) / gen_s : 0.0,
               n_eval, dev.id, stopped ? "stopped by Ctrl-C" : "stopped at " + done.stop_detail);
    if (o->verbose && n_eval > 0 && done.transfer_bytes > 0)
      fmt::print(stderr,
                 "polystack: copies between devices: {} per decode step in {:.3f} ms ({:.2f} % of "
                 "the step)\n",
                 human_bytes(done.transfer_bytes / size_t(n_eval)),
                 done.transfer_seconds * 1e3 / n_eval, 100.0 * done.transfer_seconds / gen_s);
    if (o->verbose) {
      const std::vector<ModelContext::RankMemory> mem = ctx.rank_memory();
      for (size_t r = 0; r < mem.size(); ++r)
        fmt::print(stderr, "polystack: rank {}: resident {}, peak {} (holds {} of the model)\n", r,
                   human_bytes(mem[r].resident), human_bytes(mem[r].peak),
                   human_bytes(ctx.plan().ranks[r].need));
    }
    return stopped ? 130 : 0;
  };
}

}  // namespace ps::cli
