#pragma once
// stories260K from ../shared (POLYSTACK_SHARED_DIR overrides where that is) for the tests that run
// a real model, and the CPU context options they share.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/model_context.h"

namespace ps::test {

// Null when the file is absent (the test then skips and says why).
inline std::shared_ptr<LoadedModel> stories() {
  const char* dir = std::getenv("POLYSTACK_SHARED_DIR");
  const std::string path =
      std::string(dir ? dir : POLYSTACK_SHARED_DIR) + "/models/stories260K.gguf";
  if (!std::filesystem::exists(path)) return nullptr;
  return LoadedModel::load(path);
}

// One CPU thread and a pool of n_ctx cells.
inline ContextOptions on_cpu(int n_ctx, int n_batch = 512) {
  ContextOptions o;
  o.device = "cpu";
  o.n_ctx = n_ctx;
  o.n_batch = n_batch;
  o.n_threads = 1;
  return o;
}

}  // namespace ps::test
