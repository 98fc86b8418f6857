#pragma once
// Where polystack keeps what it computed once per machine (self-check results, OpenCL program
// binaries): $XDG_CACHE_HOME/polystack when XDG_CACHE_HOME is an absolute path (the XDG rule:
// a relative one is ignored), else ~/.cache/polystack; "" when neither is set. Part of the
// backend API, so plugins keep their caches in the same place as the runtime.
#include <string>

namespace ps {

std::string polystack_cache_dir();

}  // namespace ps
