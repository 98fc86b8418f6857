#include "backend/cache_dir.h"

#include <cstdlib>
#include <filesystem>

namespace ps {

std::string polystack_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg == '/') return (std::filesystem::path(xdg) / "polystack").string();
  const char* home = std::getenv("HOME");
  if (home && *home) return (std::filesystem::path(home) / ".cache" / "polystack").string();
  return "";
}

}  // namespace ps
