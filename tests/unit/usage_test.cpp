// The command line's own errors: "did you mean" and the arguments checked before CLI11 parses
// them, in the words the user typed.
#include "cli/usage.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace ps::cli {
namespace {

TEST(Usage, NearestTakesSlipsNotStrangers) {
  const std::vector<std::string> flags = {"--temp", "--top-k", "--top-p", "--threads", "-t"};
  EXPECT_EQ(nearest("--tmp", flags).value_or(""), "--temp");
  EXPECT_EQ(nearest("--tepm", flags).value_or(""), "--temp");  // a transposition is one edit
  EXPECT_EQ(nearest("--top_k", flags).value_or(""), "--top-k");
  EXPECT_EQ(nearest("--TEMP", flags).value_or(""), "--temp");
  EXPECT_FALSE(nearest("-x", flags).has_value());  // one letter from -t, but nothing in common
  EXPECT_EQ(nearest("--thread", flags).value_or(""), "--threads");
  EXPECT_EQ(nearest("--thr", flags).value_or(""), "--threads");  // a prefix of one flag only
  EXPECT_FALSE(nearest("--quantum", flags).has_value());
  EXPECT_FALSE(nearest("--to", flags).has_value());  // a prefix of several
  const std::vector<std::string> commands = {"run", "serve", "chat", "bench"};
  EXPECT_EQ(nearest("rnu", commands).value_or(""), "run");
  EXPECT_EQ(nearest("server", commands).value_or(""), "serve");
  EXPECT_FALSE(nearest("xyz", commands).has_value());
}

struct Cmd {
  CLI::App app{"test"};
  CLI::App* run = app.add_subcommand("run", "Generate");
  CLI::App* quantize = app.add_subcommand("quantize", "Convert");
  std::string prompt, type, layers;
  int ctx = 0, n = 0;
  bool flag = false;
  std::vector<int> list;
  Cmd() {
    run->add_option("-p,--prompt", prompt);
    run->add_option("-c,--ctx-size", ctx);
    run->add_option("-n,--n-predict", n);
    run->add_option("--n-gpu-layers", layers);
    run->add_option("--list", list)->delimiter(',');
    run->add_flag("--strict", flag);
    quantize->add_option("type", type);
  }
};

std::string error_of(const CLI::App& cmd, const std::vector<std::string>& args) {
  try {
    check_arguments(cmd, args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Usage, UnknownFlagsNamedInTheirOrderWithASuggestion) {
  Cmd c;
  EXPECT_EQ(error_of(*c.run, {"--strcit"}),
            "unknown flag '--strcit' for run; did you mean --strict?");
  EXPECT_EQ(error_of(*c.run, {"--aaaaaa", "--bbbbbb"}).rfind("unknown flag '--aaaaaa'", 0), 0u);
  EXPECT_NE(error_of(*c.run, {"--zzzzzzzz"}).find("polystack help run"), std::string::npos);
  EXPECT_EQ(error_of(*c.run, {"-x"}),
            "unknown flag '-x' for run (polystack help run lists its flags)");
  // llama.cpp habits: a long flag with one dash, a count glued to -ngl.
  EXPECT_EQ(error_of(*c.run, {"-strict"}),
            "unknown flag '-strict' for run; did you mean --strict?");
  EXPECT_EQ(error_of(*c.run, {"-ngl99"}), "unknown flag '-ngl99' for run; did you mean -ngl 99?");
}

TEST(Usage, ValuesThatLookLikeFlagsBelongToTheirFlag) {
  Cmd c;
  EXPECT_EQ(error_of(*c.run, {"-p", "-", "-c", "-5"}), "");
  EXPECT_EQ(error_of(*c.run, {"-p", "--strict"}), "");  // the prompt's text
  EXPECT_EQ(error_of(*c.run, {"--prompt=--x", "-c5"}), "");
  EXPECT_EQ(error_of(*c.run, {"-ngl", "all", "--list", "1,2", "--strict"}), "");
  EXPECT_EQ(error_of(*c.run, {"--list", "-1", "2", "--strict"}), "");
  EXPECT_EQ(error_of(*c.run, {"--", "--anything"}), "");
}

TEST(Usage, StrayWordsAreNamed) {
  Cmd c;
  const std::string e = error_of(*c.run, {"-p", "two", "words"});
  EXPECT_EQ(e.rfind("unexpected argument 'words' for run", 0), 0u) << e;
  EXPECT_EQ(error_of(*c.quantize, {"Q4_K_M"}), "");  // a command with positionals
}

TEST(Usage, SpellingsAreRecorded) {
  Cmd c;
  const CheckedArguments checked =
      check_arguments(*c.run, {"-c", "7", "-ngl", "3", "--prompt", "-ngl", "-n=5"});
  const auto& spelled = checked.spelled;
  EXPECT_EQ(spelled.at(c.run->get_option("--ctx-size")), "-c");
  EXPECT_EQ(spelled.at(c.run->get_option("--n-gpu-layers")), "-ngl");
  EXPECT_EQ(spelled.at(c.run->get_option("--prompt")), "--prompt");
  // The alias flag made long for CLI11; the same word as a value left alone.
  EXPECT_EQ(checked.args, (std::vector<std::string>{"-c", "7", "--n-gpu-layers", "3", "--prompt",
                                                    "-ngl", "-n5"}));
}

}  // namespace
}  // namespace ps::cli
