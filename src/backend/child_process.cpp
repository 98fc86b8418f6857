#include "backend/child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"

extern char** environ;

namespace ps {
namespace {

// A report is small (a probe report, self-check results); more than this is a runaway child.
constexpr size_t kMaxReportBytes = 16u << 20;

struct Running {
  pid_t pid = -1;
  int fd = -1;
  std::string partial;
  bool eof = false, reaped = false;
  size_t bytes = 0;
};

void record_status(ChildResult& r, int status) {
  if (WIFEXITED(status)) r.exit_status = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
}

}  // namespace

std::string ChildResult::failure(double timeout_s, std::string_view during) const {
  if (!spawn_error.empty()) return fmt::format("could not be started ({})", spawn_error);
  if (timed_out) return fmt::format("did not answer within {:g} s {}", timeout_s, during);
  if (signal != 0)
    return fmt::format("crashed {} (signal {}, {})", during, signal, strsignal(signal));
  if (exit_status != 0) return fmt::format("exited with status {} {}", exit_status, during);
  return fmt::format("exited {} without a report", during);
}

std::string self_executable() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

double seconds_from_env(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (*end != '\0' || !(s > 0) || !std::isfinite(s) || s > 86400)
    throw UsageError(fmt::format("{}='{}' is not a number of seconds (e.g. 10)", name, v));
  return s;
}

void write_report_line(const std::string& json) {
  std::string line = json + "\n";
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(kReportFd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent is gone; nothing to report to
    p += n;
    left -= size_t(n);
  }
}

std::vector<ChildResult> run_children(const std::string& executable,
                                      const std::vector<std::vector<std::string>>& args,
                                      double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  std::vector<ChildResult> results(args.size());
  std::vector<Running> run(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      results[i].spawn_error = fmt::format("pipe: {}", std::strerror(errno));
      continue;
    }
    // The write end must not already be kReportFd: dup2 onto itself would keep O_CLOEXEC.
    int w = fds[1];
    if (w <= kReportFd) {
      w = fcntl(fds[1], F_DUPFD_CLOEXEC, kReportFd + 1);
      close(fds[1]);
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, w, kReportFd);
    posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // Its own process group, so that a hang is stopped with whatever it started.
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(executable.c_str()));
    for (const std::string& a : args[i]) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int err = posix_spawn(&pid, executable.c_str(), &fa, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(w);
    if (err != 0) {
      close(fds[0]);
      results[i].spawn_error = fmt::format("{}: {}", executable, std::strerror(err));
      continue;
    }
    run[i].pid = pid;
    run[i].fd = fds[0];
  }

  const auto take_lines = [&](size_t i, const char* data, size_t n) {
    Running& c = run[i];
    c.bytes += n;
    if (c.bytes > kMaxReportBytes) return;
    c.partial.append(data, n);
    size_t nl;
    while ((nl = c.partial.find('\n')) != std::string::npos) {
      results[i].lines.push_back(c.partial.substr(0, nl));
      c.partial.erase(0, nl + 1);
    }
  };
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<size_t> owner;
    bool waiting = false;
    for (size_t i = 0; i < run.size(); ++i) {
      Running& c = run[i];
      if (c.pid < 0) continue;
      if (!c.eof) {
        pfds.push_back({c.fd, POLLIN, 0});
        owner.push_back(i);
      }
      if (!c.reaped) {
        int status = 0;
        if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
          c.reaped = true;
          record_status(results[i], status);
        }
      }
      if (c.reaped && !c.eof) {
        // What it wrote before it ended; something it started may hold the pipe open.
        fcntl(c.fd, F_SETFL, fcntl(c.fd, F_GETFL) | O_NONBLOCK);
        char buf[65536];
        ssize_t n;
        while ((n = read(c.fd, buf, sizeof buf)) > 0) take_lines(i, buf, size_t(n));
        c.eof = true;
      }
      if (!c.reaped || !c.eof) waiting = true;
    }
    if (!waiting) break;
    const auto now = Clock::now();
    if (now >= deadline) break;
    // Wake at least every 20 ms to reap children whose pipe is closed but that still run.
    const int ms = int(std::min<int64_t>(
        20, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
    if (pfds.empty()) {  // every pipe is closed: the children are about to be reaped
      usleep(1000);
      continue;
    }
    if (poll(pfds.data(), pfds.size(), ms) < 0 && errno != EINTR) break;
    for (size_t k = 0; k < pfds.size(); ++k) {
      if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = read(pfds[k].fd, buf, sizeof buf);
      if (n > 0)
        take_lines(owner[k], buf, size_t(n));
      else if (n == 0 || errno != EINTR)
        run[owner[k]].eof = true;
    }
  }
  for (size_t i = 0; i < run.size(); ++i) {
    Running& c = run[i];
    if (c.pid < 0) continue;
    if (!c.reaped) {
      results[i].timed_out = true;
      kill(-c.pid, SIGKILL);
      kill(c.pid, SIGKILL);
      int status = 0;
      while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
      }
      record_status(results[i], status);
    }
    close(c.fd);
  }
  return results;
}

}  // namespace ps
