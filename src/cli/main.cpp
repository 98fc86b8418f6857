// polystack: command-line entry point. Results go to stdout, logs and errors to stderr; every
// error is one line and a non-zero exit.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "backend/device_choice.h"
#include "cli/commands.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/text.h"
#include "core/version.h"

namespace ps::cli {

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("{}: cannot read file", path));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

namespace {

// Error text can carry bytes from the file or the command line; keep the message on one line.
std::string one_line(std::string_view s) { return printable(s, true); }

}  // namespace
}  // namespace ps::cli

int main(int argc, char** argv) {
  // The child processes that probe plugins and self-check devices (backend/child_process.h).
  if (std::optional<int> rc = ps::run_child_command(argc, argv)) return *rc;
  CLI::App app{"polystack: run GGUF language models on whatever hardware this machine has"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("polystack ") + ps::kVersion);
  std::map<std::string, ps::cli::Action> actions;
  actions["run"] = ps::cli::add_run(app);
  actions["devices"] = ps::cli::add_devices(app);
  actions["inspect"] = ps::cli::add_inspect(app);
  actions["tokenize"] = ps::cli::add_tokenize(app);
  actions["bench"] = ps::cli::add_bench(app);
  actions["logits"] = ps::cli::add_logits(app);
  actions["quantize"] = ps::cli::add_quantize(app);
  actions["doctor"] = ps::cli::add_doctor(app);
  actions["serve"] = ps::cli::add_serve(app);
  actions["template"] = ps::cli::add_template(app);
  actions["chat"] = ps::cli::add_chat(app);
  // llama.cpp's short options of several letters (-ngl, -sm, -ts, -mg), which CLI11 does not
  // take: their long forms here.
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args)
    for (const auto& [s, l] : {std::pair{"-ngl", "--n-gpu-layers"},
                               std::pair{"-sm", "--split-mode"}, std::pair{"-ts", "--tensor-split"},
                               std::pair{"-mg", "--main-gpu"}, std::pair{"-np", "--parallel"}}) {
      const std::string short_form = s;
      if (a == short_form) a = l;
      if (a.starts_with(short_form + "=")) a = l + a.substr(short_form.size());
    }
  std::vector<char*> arg_ptrs;
  for (std::string& a : args) arg_ptrs.push_back(a.data());
  try {
    app.parse(int(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "polystack: error: %s (see --help)\n",
                 ps::cli::one_line(e.what()).c_str());
    return 2;
  }
  try {
    // A bad POLYSTACK_ISA is the user's mistake, said as such: left to the CPU backend, it
    // would show only as the CPU failing its probe.
    (void)ps::active_isa_level();
  } catch (const ps::UsageError& e) {
    std::fprintf(stderr, "polystack: error: %s\n", ps::cli::one_line(e.what()).c_str());
    return 2;
  }
  try {
    for (auto* sub : app.get_subcommands()) return actions.at(sub->get_name())();
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "polystack: error: %s\n", ps::cli::one_line(e.what()).c_str());
    return 1;
  }
}
