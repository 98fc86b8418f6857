#include "doctor/sysroot.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace ps::doctor {

namespace fs = std::filesystem;

Sysroot::Sysroot(std::string root) : root_(std::move(root)) {
  if (root_.empty()) root_.assign(1, '/');
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  std::error_code ec;
  if (!fs::is_directory(root_, ec))
    throw UsageError(fmt::format("POLYSTACK_SYSROOT={}: not a readable folder", root_));
}

Sysroot Sysroot::from_env() {
  const char* v = std::getenv("POLYSTACK_SYSROOT");
  return Sysroot(v && *v ? v : "/");
}

std::string Sysroot::host(const std::string& path) const {
  if (real()) return path;
  std::string out = root_;
  if (!path.starts_with('/')) out += '/';
  out += path;
  return out;
}

bool Sysroot::exists(const std::string& path) const {
  std::error_code ec;
  return fs::exists(fs::symlink_status(host(path), ec)) && !ec;
}

bool Sysroot::is_dir(const std::string& path) const {
  std::error_code ec;
  return fs::is_directory(host(path), ec);
}

std::optional<std::string> Sysroot::read(const std::string& path, size_t limit) const {
  std::ifstream in(host(path), std::ios::binary);
  if (!in) return std::nullopt;
  std::string s(limit, '\0');
  in.read(s.data(), std::streamsize(s.size()));
  if (in.bad()) return std::nullopt;
  s.resize(size_t(in.gcount()));
  return s;
}

std::optional<std::string> Sysroot::read_line(const std::string& path) const {
  auto s = read(path);
  if (!s) return s;
  std::string line = s->substr(0, s->find('\n'));
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  line.erase(line.begin(), std::find_if(line.begin(), line.end(), not_space));
  line.erase(std::find_if(line.rbegin(), line.rend(), not_space).base(), line.end());
  return line;
}

std::vector<std::string> Sysroot::list(const std::string& path) const {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(host(path), ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> Sysroot::link_target(const std::string& path) const {
  std::error_code ec;
  const fs::path t = fs::read_symlink(host(path), ec);
  if (ec) return std::nullopt;
  return t.string();
}

std::string Sysroot::resolve(const std::string& path) const {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    const auto t = link_target(p);
    if (!t) return p;
    p = t->starts_with("/") ? *t : (fs::path(p).parent_path() / *t).lexically_normal().string();
  }
  return p;
}

std::optional<FileMode> Sysroot::mode(const std::string& path) const {
  struct stat st {};
  if (::stat(host(path).c_str(), &st) != 0) return std::nullopt;
  return FileMode{unsigned(st.st_mode & 07777), unsigned(st.st_uid), unsigned(st.st_gid)};
}

bool can_open_rw(const FileMode& m, unsigned uid, const std::vector<unsigned>& gids) {
  if (uid == 0) return true;
  if (m.uid == uid) return (m.mode & 0600) == 0600;
  if (std::find(gids.begin(), gids.end(), m.gid) != gids.end()) return (m.mode & 060) == 060;
  return (m.mode & 06) == 06;
}

}  // namespace ps::doctor
