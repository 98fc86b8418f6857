// `polystack chat`: a conversation in the terminal. Each turn renders the whole conversation
// with the model's chat template and submits it to the engine `run` and `serve` use; the
// engine takes over the sequence the previous turn left, so only the new turn is evaluated.
// Line editing and history come from libedit; with stdin not a terminal each line is one user
// message and each reply is printed on its own line (scriptable).
#include <editline/readline.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/chat_setup.h"
#include "engine/engine.h"
#include "engine/thinking.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ps::cli {
namespace {

using ojson = nlohmann::ordered_json;

std::atomic<int> g_interrupts{0};

extern "C" void on_sigint(int) { g_interrupts.fetch_add(1); }

// SIGINT counts Ctrl-C. While a reply is written, interrupted system calls restart (a write to
// the terminal must not fail half way); at the prompt they do not, so that the read libedit is
// blocked in returns and the loop sees the count change.
void catch_sigint(bool restart) {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = restart ? SA_RESTART : 0;
  sigaction(SIGINT, &sa, nullptr);
}

const char* kHelp =
    "/clear          start a new conversation (the system prompt stays)\n"
    "/system TEXT    set the system prompt (no TEXT: none) and start anew\n"
    "/save FILE      write the conversation as JSON ({\"messages\": [...]})\n"
    "/load FILE      read a conversation written by /save\n"
    "/help           this list\n"
    "/exit           leave (also Ctrl-D, or Ctrl-C twice at the prompt)\n"
    "A line ending in \\ continues on the next line; \"\"\" on its own line starts and ends a\n"
    "block of several lines. Ctrl-C stops a reply.\n";

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

class Chat {
 public:
  struct Options {
    std::string system;
    bool hide_thinking = false;
    bool verbose = false;
    int n_predict = -1;
    SamplerParams sampling;
    int64_t seed = -1;
    std::optional<bool> enable_thinking;
    std::shared_ptr<const grammar::Grammar> grammar;  // every reply's (null: none)
  };

  Chat(Engine& engine, const Tokenizer& tok, jinja::ChatTemplate& tmpl, Options o, bool tty)
      : engine_(engine), tok_(tok), tmpl_(tmpl), o_(std::move(o)), tty_(tty) {
    system_ = o_.system;
    rng_.seed(o_.seed >= 0 ? uint64_t(o_.seed) : std::random_device{}());
  }

  // Handles one line of input: a command or a user message. False: leave. `interrupts`: the
  // Ctrl-C count when the input was read; one more since then stops the reply.
  bool handle(const std::string& input, int interrupts) {
    const std::string line = trim(input);
    if (line.empty()) return true;
    if (line[0] == '/') return command(line);
    reply(line, interrupts);
    return true;
  }

 private:
  Engine& engine_;
  const Tokenizer& tok_;
  jinja::ChatTemplate& tmpl_;
  Options o_;
  bool tty_;
  std::string system_;
  ojson messages_ = ojson::array();  // user and assistant turns, no system message
  std::mt19937_64 rng_;

  void note(const std::string& s) const { fmt::print(stderr, "polystack: {}\n", s); }

  ojson conversation() const {
    ojson all = ojson::array();
    if (!system_.empty()) all.push_back({{"role", "system"}, {"content", system_}});
    for (const auto& m : messages_) all.push_back(m);
    return all;
  }

  bool command(const std::string& line) {
    const size_t sp = line.find(' ');
    const std::string cmd = line.substr(0, sp);
    const std::string arg = sp == std::string::npos ? "" : trim(line.substr(sp + 1));
    if (cmd == "/exit" || cmd == "/quit" || cmd == "/bye") return false;
    if (cmd == "/help" || cmd == "/?") {
      std::fputs(kHelp, stdout);
    } else if (cmd == "/clear") {
      messages_ = ojson::array();
      note("a new conversation");
    } else if (cmd == "/system") {
      system_ = arg;
      messages_ = ojson::array();
      note(arg.empty() ? "no system prompt; a new conversation"
                       : "system prompt set; a new conversation");
    } else if (cmd == "/save") {
      if (arg.empty()) return note("/save needs a file name"), true;
      const ojson all = conversation();
      std::ofstream out(arg, std::ios::binary);
      out << ojson{{"messages", all}}.dump(2) << "\n";
      if (!out) return note(fmt::format("cannot write {}", arg)), true;
      note(fmt::format("saved {} messages to {}", all.size(), arg));
    } else if (cmd == "/load") {
      if (arg.empty()) return note("/load needs a file name"), true;
      load(arg);
    } else {
      note(fmt::format("unknown command {}; /help lists them", cmd));
    }
    return true;
  }

  void load(const std::string& path) {
    ojson j;
    try {
      j = ojson::parse(read_file_bytes(path));
    } catch (const std::exception& e) {
      return note(fmt::format("cannot load {}: {}", path, e.what()));
    }
    if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array())
      return note(fmt::format("cannot load {}: expected an object with \"messages\"", path));
    std::string system;
    ojson msgs = ojson::array();
    for (const auto& m : j["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
          !m.contains("content") || !m["content"].is_string())
        return note(
            fmt::format("cannot load {}: each message needs a role and a text content", path));
      if (m["role"] == "system" && msgs.empty())
        system = m["content"].get<std::string>();
      else
        msgs.push_back(m);
    }
    system_ = system;
    messages_ = std::move(msgs);
    note(fmt::format("loaded {} messages from {}", j["messages"].size(), path));
  }

  std::string render() const {
    ojson vars = {{"messages", conversation()},
                  {"tools", nullptr},
                  {"documents", nullptr},
                  {"add_generation_prompt", true}};
    if (o_.enable_thinking) vars["enable_thinking"] = *o_.enable_thinking;
    return tmpl_.render(std::move(vars));
  }

  // The prompt for the conversation; the oldest turns are dropped (with a note) until it fits
  // with room for a reply.
  std::optional<std::vector<int32_t>> fitting_prompt(std::string& text) {
    const int n_ctx = engine_.n_ctx();
    const int room = std::min(256, n_ctx / 4);
    for (;;) {
      text = render();
      std::vector<int32_t> ids = tok_.encode(text, true, true);
      if (int(ids.size()) + room <= n_ctx) return ids;
      if (messages_.size() <= 1) {
        note(
            fmt::format("this message needs {} tokens with the system prompt, more than the "
                        "context of {} leaves for it; it was not sent",
                        ids.size(), n_ctx));
        messages_ = ojson::array();
        return std::nullopt;
      }
      // Whole turns go: the oldest user message and the replies before the next one.
      size_t n = 1;
      while (n < messages_.size() - 1 && messages_[n]["role"] != "user") ++n;
      messages_.erase(messages_.begin(), messages_.begin() + long(n));
      note(fmt::format("the context is full: dropped the oldest turn ({} messages kept)",
                       messages_.size()));
    }
  }

  void reply(const std::string& user, int interrupts) {
    messages_.push_back({{"role", "user"}, {"content", user}});
    std::string text;
    std::optional<std::vector<int32_t>> prompt;
    try {
      prompt = fitting_prompt(text);
    } catch (const TemplateError& e) {
      messages_.erase(messages_.end() - 1);
      return note(fmt::format("the chat template failed: {}",
                              e.raised() ? e.message() : jinja::describe(e)));
    }
    if (!prompt) return;
    CompletionRequest req;
    req.prompt = std::move(*prompt);
    req.sampling = o_.sampling;
    req.sampling.seed = rng_();
    req.grammar = o_.grammar;
    req.max_tokens = o_.n_predict;
    std::shared_ptr<Stream> events = engine_.submit(std::move(req));
    if (!events) throw BackendError("the engine refused the request");
    // A template that opens the thinking block itself (its generation prompt ends in <think>)
    // starts the reply inside it.
    const std::string tail = trim(text);
    ThinkingSplitter split(tail.size() >= 7 && tail.compare(tail.size() - 7, 7, "<think>") == 0);
    const bool dim = tty_ && isatty(STDOUT_FILENO);
    std::string answer, thinking;
    bool in_dim = false;
    bool cancelled = false;
    StreamEvent done;
    for (;;) {
      if (!cancelled && g_interrupts.load() != interrupts) {
        engine_.cancel(events);
        cancelled = true;
      }
      std::optional<StreamEvent> e = events->pop(std::chrono::milliseconds(50));
      if (!e) continue;
      const ThinkingSplitter::Parts out = split.feed(e->text, e->done);
      thinking += out.thinking;
      answer += out.answer;
      if (!out.thinking.empty() && !o_.hide_thinking) {
        if (dim && !in_dim) std::fputs("\x1b[2m", stdout), in_dim = true;
        std::fwrite(out.thinking.data(), 1, out.thinking.size(), stdout);
      }
      if (!out.answer.empty()) {
        if (in_dim) std::fputs("\x1b[0m", stdout), in_dim = false;
        // The answer's leading newlines after a thinking block are the template's layout.
        std::string a = out.answer;
        if (answer.size() == a.size() && !thinking.empty()) a.erase(0, a.find_first_not_of('\n'));
        std::fwrite(a.data(), 1, a.size(), stdout);
      }
      std::fflush(stdout);
      if (e->done) {
        done = std::move(*e);
        break;
      }
    }
    if (in_dim) std::fputs("\x1b[0m", stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (done.finish_reason == "error") throw BackendError(done.error);
    if (cancelled) note("stopped");
    if (o_.verbose)
      note(fmt::format(
          "{} prompt tokens ({} kept from the previous turn, {} evaluated), {} "
          "generated at {:.1f} tokens/s",
          done.prompt_tokens, done.cached_tokens, done.prompt_tokens - done.cached_tokens,
          done.completion_tokens,
          done.generation_seconds > 0 ? done.completion_tokens / done.generation_seconds : 0.0));
    if (done.finish_reason == "length" && !cancelled)
      note(fmt::format("the reply was cut at {} tokens ({})", done.completion_tokens,
                       done.stop_detail));
    // The thinking is kept apart: templates that render reasoning_content see it, the others
    // do not feed it back.
    ojson m = {{"role", "assistant"}, {"content", trim(answer)}};
    if (!thinking.empty()) m["reasoning_content"] = trim(thinking);
    messages_.push_back(std::move(m));
  }
};

// One message of possibly several lines from the terminal, or nullopt at the end (Ctrl-D, or
// Ctrl-C twice). `interrupts`: the Ctrl-C count at the moment the message was complete.
std::optional<std::string> read_message_tty(int& interrupts) {
  std::string text;
  bool block = false;
  int interrupts_seen = 0;
  for (;;) {
    const int before = g_interrupts.load();
    interrupts = before;
    catch_sigint(false);
    char* raw = readline(text.empty() && !block ? "> " : "... ");
    catch_sigint(true);
    if (!raw) {
      if (g_interrupts.load() != before) {
        if (++interrupts_seen >= 2) return std::nullopt;
        std::fputs("\n(Ctrl-C again or Ctrl-D to leave)\n", stdout);
        text.clear();
        block = false;
        continue;
      }
      std::fputs("\n", stdout);
      return std::nullopt;
    }
    std::string line(raw);
    std::free(raw);
    interrupts_seen = 0;
    if (line == "\"\"\"") {
      if (block) {
        if (!text.empty()) add_history(text.c_str());
        return text;
      }
      block = true;
      continue;
    }
    if (block) {
      text += (text.empty() ? "" : "\n") + line;
      continue;
    }
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      text += line + "\n";
      continue;
    }
    text += line;
    if (!trim(text).empty()) add_history(text.c_str());
    return text;
  }
}

}  // namespace

Action add_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "Chat with a model in the terminal");
  struct Opts {
    ModelFlags mf;
    Chat::Options co;
    std::string chat_template, reasoning;
    GrammarFlags grammar;
  };
  auto o = std::make_shared<Opts>();
  add_model_flags(cmd, o->mf, false);
  cmd->get_option("--model")->description(
      "GGUF model file (default: POLYSTACK_CHAT_MODEL, else the default chat model; see the "
      "README)");
  cmd->add_option("--system", o->co.system, "The system prompt");
  add_chat_template_flags(cmd, o->chat_template, o->reasoning);
  cmd->add_flag("--hide-thinking", o->co.hide_thinking, "Do not show the model's thinking");
  cmd->add_flag("-v,--verbose", o->co.verbose,
                "After each reply: its prompt tokens (kept and evaluated), tokens and speed");
  cmd->add_option("-n,--n-predict", o->co.n_predict,
                  "Most tokens per reply (-1: until the model ends its turn)")
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("-s,--seed", o->co.seed, "Random seed (-1: random)");
  o->co.sampling.temp = 0.7f;
  cmd->add_option("--temp", o->co.sampling.temp, "Temperature (0: greedy; default 0.7)");
  cmd->add_option("--top-k", o->co.sampling.top_k, "Keep the k most likely tokens (0: off)");
  cmd->add_option("--top-p", o->co.sampling.top_p, "Nucleus sampling threshold (1: off)");
  cmd->add_option("--min-p", o->co.sampling.min_p, "Drop tokens below min-p x the top probability");
  cmd->add_option("--repeat-penalty", o->co.sampling.repeat_penalty,
                  "Penalty for repeated tokens (1: off)");
  add_grammar_flags(cmd, o->grammar);
  return [o] {
    o->co.grammar = load_grammar(o->grammar);
    if (!o->reasoning.empty()) o->co.enable_thinking = o->reasoning == "on";
    const ModelChoice choice = resolve_chat_model_path(o->mf);
    if (choice.origin != "-m") fmt::print(stderr, "polystack: model: {}\n", choice.origin);
    check_device_flag(o->mf);
    auto model = LoadedModel::load(choice.path);
    Engine engine(model, o->mf.context, /*n_slots=*/1, /*max_queue=*/0);
    print_device_choice(engine.context(), o->co.verbose);
    const Tokenizer& tok = *model->tokenizer;
    std::unique_ptr<jinja::ChatTemplate> tmpl = model_chat_template(*model, o->chat_template);
    fmt::print(stderr, "polystack: chat template: {}, context {} tokens\n",
               describe_chat_template(*tmpl, o->co.enable_thinking), engine.n_ctx());
    const bool tty = isatty(STDIN_FILENO);
    Chat chat(engine, tok, *tmpl, o->co, tty);
    catch_sigint(true);
    if (!tty) {
      std::string line;
      while (std::getline(std::cin, line))
        if (!chat.handle(line, g_interrupts.load())) break;
      return 0;
    }
    fmt::print(stderr, "polystack: type a message; /help lists the commands; Ctrl-D leaves\n");
    for (;;) {
      int interrupts = 0;
      std::optional<std::string> msg = read_message_tty(interrupts);
      if (!msg || !chat.handle(*msg, interrupts)) break;
    }
    return 0;
  };
}

}  // namespace ps::cli
