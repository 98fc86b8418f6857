#pragma once
// A Jinja template as Hugging Face renders chat templates: Python's jinja2 in its immutable
// sandbox with trim_blocks, lstrip_blocks and loop controls, a `tojson` filter that is
// json.dumps keeping non-ASCII text, and the globals raise_exception and strftime_now (besides
// jinja2's range, dict, namespace and joiner). Output matches jinja2's byte for byte,
// including how Python prints values (True, None, 1.0, ['a'], {'k': 1}).
//
// Templates come from files and requests nobody vetted: rendering is bounded in output size,
// steps and nesting, and every problem is a TemplateError ("template line 12: ..."), never a
// crash or a hang.
#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "template/value.h"

namespace ps::jinja {

struct RenderOptions {
  size_t max_output = 16u << 20;    // bytes of output
  uint64_t max_steps = 10'000'000;  // statements executed, loop iterations and calls
  int max_depth = 1000;             // nesting of expressions, statements and macro calls
  // The time strftime_now formats, in local time; unset: now.
  std::optional<std::time_t> now;
};

class Template {
 public:
  // Parses the source; TemplateError (with its line) when it is not a template jinja2 accepts.
  explicit Template(std::string_view source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `variables` (a JSON object: each key a variable). TemplateError on failure;
  // e.raised() when the template called raise_exception.
  std::string render(const nlohmann::ordered_json& variables,
                     const RenderOptions& options = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "template line 12: message", or "message" when no line is known.
std::string describe(const TemplateError& e);

}  // namespace ps::jinja
