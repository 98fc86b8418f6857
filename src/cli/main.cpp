// polystack: command-line entry point. Results go to stdout, logs and errors to stderr; every
// error is one line and a non-zero exit.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "backend/device_choice.h"
#include "cli/commands.h"
#include "cli/usage.h"
#include "cluster/cluster.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/text.h"
#include "core/version.h"
#include "engine/pipeline.h"

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

namespace {

int run_command(int argc, char** argv) {
  CLI::App app{"polystack: run GGUF language models on whatever hardware this machine has",
               "polystack"};
  app.formatter(std::make_shared<ps::cli::HelpFormatter>());
  // Defaults shown in --help: subcommands take the root's option defaults when created.
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("polystack ") + ps::kVersion);
  std::map<std::string, ps::cli::Action> actions;
  actions["run"] = ps::cli::add_run(app);
  actions["chat"] = ps::cli::add_chat(app);
  actions["serve"] = ps::cli::add_serve(app);
  actions["devices"] = ps::cli::add_devices(app);
  actions["doctor"] = ps::cli::add_doctor(app);
  actions["bench"] = ps::cli::add_bench(app);
  actions["inspect"] = ps::cli::add_inspect(app);
  actions["tokenize"] = ps::cli::add_tokenize(app);
  actions["template"] = ps::cli::add_template(app);
  actions["quantize"] = ps::cli::add_quantize(app);
  actions["logits"] = ps::cli::add_logits(app);
  std::vector<std::string> args(argv, argv + argc);
  const std::string usage = fmt::format(
      "usage: polystack COMMAND [FLAGS]   (polystack help COMMAND: its flags)\n\ncommands:\n{}",
      ps::cli::command_list(app));
  auto error = [](const std::string& msg, int rc) {
    std::fflush(stdout);
    std::fprintf(stderr, "polystack: error: %s\n", ps::cli::one_line(msg).c_str());
    return rc;
  };
  auto unknown_command = [&](const std::string& name) {
    std::vector<std::string> names;
    for (const auto& [n, a] : actions) names.push_back(n);
    std::string msg = fmt::format("unknown command '{}'", name);
    if (auto near = ps::cli::nearest(name, names))
      msg += fmt::format("; did you mean '{}'?", *near);
    std::string list;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      list += (list.empty() ? "" : ", ") + sub->get_name();
    return error(msg + " (commands: " + list + ")", 2);
  };
  // `polystack`, `polystack help [COMMAND]`.
  if (args.size() == 1) {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  if (args[1] == "help") {
    if (args.size() == 2) {
      std::fputs(usage.c_str(), stdout);
      return 0;
    }
    if (args.size() > 3) return error("help takes one command: polystack help COMMAND", 2);
    if (!actions.count(args[2])) return unknown_command(args[2]);
    std::fputs(app.get_subcommand(args[2])->help("polystack").c_str(), stdout);
    return 0;
  }
  const bool root_flag = args[1].starts_with("-");
  if (!root_flag && !actions.count(args[1])) return unknown_command(args[1]);
  ps::cli::CheckedArguments checked;
  const CLI::App* cmd = root_flag ? nullptr : app.get_subcommand(args[1]);
  try {
    if (cmd) {
      checked = ps::cli::check_arguments(*cmd, {args.begin() + 2, args.end()});
      // llama.cpp's short options of several letters (-ngl, -sm, -ts, -mg, -np), which CLI11
      // does not take, in their long forms.
      std::copy(checked.args.begin(), checked.args.end(), args.begin() + 2);
    } else if (args[1] != "--help" && args[1] != "-h" && args[1] != "--version") {
      const std::vector<std::string> root_flags = {"--help", "-h", "--version"};
      const std::string name = args[1].substr(0, args[1].find('='));
      const auto near = ps::cli::nearest(name, root_flags);
      throw ps::UsageError(
          fmt::format("unknown flag '{}'{} (a command comes first: polystack help lists them)",
                      name, near ? fmt::format("; did you mean {}?", *near) : ""));
    }
  } catch (const ps::UsageError& e) {
    return error(e.what(), 2);
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
    if (!cmd) return error(e.what(), 2);
    return error(fmt::format("{} (polystack help {})",
                             ps::cli::restate_parse_error(e, *cmd, checked), cmd->get_name()),
                 2);
  }
  try {
    // A bad POLYSTACK_ISA is the user's mistake, said as such: left to the CPU backend, it
    // would show only as the CPU failing its probe.
    (void)ps::active_isa_level();
  } catch (const ps::UsageError& e) {
    return error(e.what(), 2);
  }
  try {
    for (auto* sub : app.get_subcommands()) return actions.at(sub->get_name())();
    return 2;
  } catch (const CLI::ValidationError& e) {
    return error(e.what(), 2);
  } catch (const ps::UsageError& e) {
    return error(e.what(), 2);
  } catch (const std::exception& e) {
    return error(e.what(), 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The child processes that probe plugins and self-check devices (backend/child_process.h).
  if (std::optional<int> rc = ps::run_child_command(argc, argv)) return *rc;
  // In an MPI job (--mpi), rank 0 runs the command and the other ranks serve its layers.
  ps::cluster::Cluster* job = nullptr;
  if (std::find(argv + 1, argv + argc, std::string_view("--mpi")) != argv + argc) {
    try {
      job = ps::cluster::start_mpi();
    } catch (const ps::UsageError& e) {
      std::fprintf(stderr, "polystack: error: %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "polystack: error: %s\n", e.what());
      return 1;
    }
    if (job->rank() > 0) {
      std::string own_model;
      for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if ((a == "-m" || a == "--model") && i + 1 < argc) own_model = argv[i + 1];
        if (a.starts_with("--model=")) own_model = std::string(a.substr(8));
      }
      return ps::run_pipeline_worker(*job, own_model);
    }
  }
  const int rc = run_command(argc, argv);
  if (job) ps::stop_pipeline_workers(*job);
  return rc;
}
