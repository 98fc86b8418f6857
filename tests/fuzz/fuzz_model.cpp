// libFuzzer target for loading and running a model: the input is a GGUF file, which is loaded as
// `polystack run` loads one (the architecture, its tensors and the tokenizer), then a short text
// is encoded and decoded and a session with a context of 8 positions on the CPU evaluates two
// tokens. A ps::Error at any step is a normal outcome; anything else (a crash, a sanitizer
// report, an escaping std::bad_alloc, a hang) is a finding.
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/model_context.h"
#include "model/model.h"

namespace {

namespace fs = std::filesystem;

constexpr int kContext = 8;
// Inputs whose session would need more than this (the KV cache and one pass's intermediate
// tensors, estimated from the hyperparameters) are skipped: a model that large is a valid file,
// just not one to run thousands of times a second.
constexpr double kMemoryLimit = 256.0 * 1024 * 1024;

const fs::path& scratch_file() {
  static const fs::path p = [] {
    const fs::path dir = fs::temp_directory_path() / ("fuzz-model-" + std::to_string(getpid()));
    fs::create_directories(dir);
    return dir / "model.gguf";
  }();
  return p;
}

double session_bytes(const ps::ModelParams& p) {
  const double kv = double(p.head_dim) * double(p.n_head_kv) * 2 * 2 * kContext * double(p.n_layer);
  const double per_token = double(p.n_embd) * 8 + double(p.n_ff) * 4 +
                           double(p.head_dim) * double(p.n_head + 2 * p.n_head_kv) * 2 +
                           double(p.n_head) * kContext + double(p.n_vocab);
  return kv + per_token * 4 * kContext;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The scalar kernels: the per-ISA ones are built without sanitizers in the fuzz build.
  setenv("POLYSTACK_ISA", "scalar", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& path = scratch_file();
  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (!out) return 0;
  if (size) std::fwrite(data, 1, size, out);
  std::fclose(out);

  std::shared_ptr<ps::LoadedModel> m;
  try {
    m = ps::LoadedModel::load(path.string());
  } catch (const ps::Error&) {
    return 0;
  }
  const ps::ModelParams& p = m->model->params();
  if (!(session_bytes(p) <= kMemoryLimit)) return 0;

  try {
    const ps::Tokenizer& tok = *m->tokenizer;
    std::vector<int32_t> ids = tok.encode("Once upon a time, <s> caf\xc3\xa9 42!", true, true);
    (void)tok.decode(ids, true);
    (void)tok.decode(ids, false);
    const int32_t n_vocab = tok.n_vocab();
    while (ids.size() < 2) ids.push_back(int32_t(ids.size()) % n_vocab);
    const std::array<int32_t, 2> two{ids[0], ids[ids.size() - 1]};
    for (const int32_t id : two) (void)tok.token_to_piece(id, true);

    ps::ContextOptions opts;
    opts.n_ctx = kContext;
    opts.n_batch = kContext;
    opts.n_threads = 1;
    opts.device = "cpu";
    ps::ModelContext session(m, opts);
    const std::vector<float> logits = session.eval(two);
    if (logits.size() != size_t(n_vocab)) __builtin_trap();
  } catch (const ps::Error&) {
  }
  return 0;
}
