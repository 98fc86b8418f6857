#pragma once
// Everything `doctor` reads of the system goes through here, under POLYSTACK_SYSROOT (default
// "/"), so that tests lay out a fake machine in a folder: PCI devices as folders with
// vendor/device/class files and a driver symlink, libraries as files and symlinks, device nodes
// as plain files with the mode and group of the real ones.
#include <optional>
#include <string>
#include <vector>

namespace ps::doctor {

struct FileMode {
  unsigned mode = 0;  // permission bits
  unsigned uid = 0, gid = 0;
};

class Sysroot {
 public:
  // "/" or the folder a fake machine lies in; UsageError when it is not a readable folder.
  explicit Sysroot(std::string root);
  // POLYSTACK_SYSROOT, else "/".
  static Sysroot from_env();
  bool real() const { return root_ == "/"; }
  const std::string& root() const { return root_; }
  // The host path of a path of the machine ("/sys/..." -> ROOT/sys/...).
  std::string host(const std::string& path) const;

  bool exists(const std::string& path) const;
  bool is_dir(const std::string& path) const;
  // The file's text (at most `limit` bytes), or nothing when it cannot be read.
  std::optional<std::string> read(const std::string& path, size_t limit = size_t(1) << 20) const;
  // The first line, trimmed.
  std::optional<std::string> read_line(const std::string& path) const;
  // Names in a folder, sorted; empty when it is absent.
  std::vector<std::string> list(const std::string& path) const;
  // A symlink's target as written; nothing when it is not a symlink.
  std::optional<std::string> link_target(const std::string& path) const;
  // The machine path a chain of symlinks ends at (relative links resolved within the sysroot).
  std::string resolve(const std::string& path) const;
  std::optional<FileMode> mode(const std::string& path) const;

 private:
  std::string root_;
};

// Whether a process with uid and groups may open a file of this mode for reading and writing.
bool can_open_rw(const FileMode& m, unsigned uid, const std::vector<unsigned>& gids);

}  // namespace ps::doctor
