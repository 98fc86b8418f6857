#pragma once
// What could take polystack down runs in a child process: loading a backend plugin, probing its
// driver, the first kernels on a device (the self-check). The child is this executable again,
// started with a hidden command; it reports back in lines of JSON on a pipe (kReportFd), so a
// crash, a hang or an early exit in a driver ends the child and is reported, never the parent.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

inline constexpr int kReportFd = 3;

struct ChildResult {
  std::vector<std::string> lines;  // the complete lines the child wrote to kReportFd
  bool timed_out = false;          // stopped (with its process group) at the deadline
  int exit_status = -1;            // when it exited
  int signal = 0;                  // when a signal ended it
  std::string spawn_error;         // when it could not be started at all
  bool exited_cleanly() const {
    return spawn_error.empty() && !timed_out && signal == 0 && exit_status == 0;
  }
  // What ended it, with `during` ("while loading") in its place: "crashed while loading (signal
  // 11, Segmentation fault)", "did not answer within 10 s while probing", "exited with status 3
  // while loading", "exited while loading without a report".
  std::string failure(double timeout_s, std::string_view during) const;
};

// Starts `executable args...` for each entry, all at once, and collects their reports; each is
// stopped at timeout_s after the start. The children's stdout goes to stderr, so nothing of
// theirs reaches a command's results.
std::vector<ChildResult> run_children(const std::string& executable,
                                      const std::vector<std::vector<std::string>>& args,
                                      double timeout_s);

// This process's own executable (/proc/self/exe).
std::string self_executable();

// Seconds from the environment variable `name` (a positive number), else fallback; UsageError
// naming the variable when it is set to something else.
double seconds_from_env(const char* name, double fallback);

// In a child: one report line (a JSON text without newlines) to the parent.
void write_report_line(const std::string& json);

}  // namespace ps
