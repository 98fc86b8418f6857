#include "backend/registry.h"
#include "cli/commands.h"
#include "core/error.h"

namespace ps::cli {

void add_model_flags(CLI::App* cmd, ModelFlags& f, bool model_required) {
  auto* m = cmd->add_option("-m,--model", f.model, "GGUF model file");
  if (model_required) m->required();
  cmd->add_option("-c,--ctx-size", f.session.n_ctx,
                  "Context size in tokens (0: the model's, at most 4096)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("-b,--batch-size", f.session.n_batch, "Prompt tokens per forward pass")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("-t,--threads", f.session.n_threads, "CPU threads (0: physical cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--device", f.session.device,
                  "Device to run on, e.g. cpu or vulkan:0 (default: chosen by policy)");
  cmd->add_flag("--strict", f.session.strict,
                "Fail instead of running unsupported ops on another device");
}

void check_device_flag(const ModelFlags& f) {
  if (f.session.device.empty()) return;
  DeviceOptions probe;
  probe.n_threads = 1;
  Registry::global().open(f.session.device, probe);
}

}  // namespace ps::cli
