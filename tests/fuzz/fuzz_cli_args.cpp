// libFuzzer target for the command line's own parsing (cli/usage.h): the arguments of real
// commands (run, bench, quantize) checked before CLI11, "did you mean" over them, CLI11's
// errors restated in the words typed, and the help text. Input: arguments separated by NUL
// bytes, the first naming the command. Nothing may crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/usage.h"
#include "core/error.h"

namespace ps::cli {
// main.cpp's, which this target does not link.
std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path + ": cannot read file");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
}  // namespace ps::cli

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"polystack"};
  std::string cur;
  for (size_t i = 0; i < size && args.size() < 40; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += char(data[i]);
    }
  }
  args.push_back(cur);
  CLI::App app{"fuzz"};
  app.formatter(std::make_shared<ps::cli::HelpFormatter>());
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);
  // Registered only: the actions are never run, but they own what the options write to.
  const std::vector<ps::cli::Action> actions = {ps::cli::add_run(app), ps::cli::add_bench(app),
                                                ps::cli::add_quantize(app)};
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  const CLI::App* cmd = nullptr;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->get_name() == args[1]) cmd = sub;
  if (!cmd) {
    (void)ps::cli::nearest(args[1], names);
    return 0;
  }
  ps::cli::CheckedArguments checked;
  try {
    checked = ps::cli::check_arguments(*cmd, {args.begin() + 2, args.end()});
  } catch (const ps::UsageError&) {
    return 0;
  }
  std::copy(checked.args.begin(), checked.args.end(), args.begin() + 2);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  try {
    app.parse(int(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    (void)ps::cli::restate_parse_error(e, *cmd, checked);
  } catch (const ps::Error&) {
  }
  if (size % 7 == 0) (void)cmd->help();
  return 0;
}
