#pragma once
// The command line's own help and errors, in the words a user typed: the command list, "did you
// mean" for a misspelt command or flag, and CLI11's errors restated with the flag as written.
#include <CLI/CLI.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ps::cli {

// llama.cpp's short options of several letters, which CLI11 cannot declare: each with the long
// option it stands for.
struct ShortAlias {
  const char* alias;  // "-ngl"
  const char* name;   // "--n-gpu-layers"
};
const std::vector<ShortAlias>& short_aliases();

// "  run        Generate text from a prompt", one line per command, in the order added.
std::string command_list(const CLI::App& app);

// The candidate nearest to `word` when it is near enough to be a slip of the keyboard (a few
// edits, by the length of the word), else nothing.
std::optional<std::string> nearest(const std::string& word,
                                   const std::vector<std::string>& candidates);

// Checks a command's arguments before CLI11 parses them, so that errors name what the user
// wrote: an unknown flag ("unknown flag '--tmp' for run; did you mean --temp?"), a long flag
// with one dash, an argument no flag takes. Throws UsageError.
struct CheckedArguments {
  std::map<const CLI::Option*, std::string> spelled;  // each option given: the spelling used
  std::vector<std::string> args;  // the arguments with each alias flag (not value) made long
};
CheckedArguments check_arguments(const CLI::App& cmd, const std::vector<std::string>& args);

// CLI11's message for a parse error, with option names as the user wrote them, stray words in
// their order, and plain words where CLI11's are not.
std::string restate_parse_error(const CLI::ParseError& e, const CLI::App& cmd,
                                const CheckedArguments& checked);

// Help text with each option's default (where the description does not state it) and the
// short aliases beside the long names.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool positional) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
  std::string make_option_desc(const CLI::Option* opt) const override;
};

}  // namespace ps::cli
