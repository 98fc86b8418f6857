#pragma once
// The web chat page's files (src/server/ui), embedded in the binary at build time.
#include <cstddef>
#include <string_view>

namespace ps::server {

struct UiFile {
  const char* name;  // "index.html", "chat.js", ...
  const char* content_type;
  const unsigned char* data;
  size_t size;
};

// The embedded file of that name, or nullptr.
const UiFile* find_ui_file(std::string_view name);

}  // namespace ps::server
