#include <fmt/format.h>

#include "backend/device_choice.h"
#include "backend/physical_device.h"
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
                  "Device: auto (default), cpu, gpu, an API (cuda, vulkan, ...), an id "
                  "(vulkan:0), a UUID or pci:0000:41:00.0; default POLYSTACK_DEVICE");
  cmd->add_flag("--strict", f.session.strict,
                "Fail instead of falling back: a device passed over for a failure, ops run "
                "elsewhere");
  cmd->add_flag_callback(
      "--no-self-check", [&f] { f.session.self_check = false; },
      "Run on a GPU without checking it against the CPU first");
  cmd->add_option_function<std::string>(
      "--n-gpu-layers",
      [&f](const std::string& v) {
        if (v == "all") {
          f.session.n_gpu_layers = -1;
          return;
        }
        char* end = nullptr;
        const long n = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || n < 0 || n > (1 << 20))
          throw CLI::ValidationError("--n-gpu-layers",
                                     "'" + v + "' is not all or a count of layers");
        f.session.n_gpu_layers = int(n);
      },
      "Layers on the GPU: all (default) or N, the last N (N above the layer count: the "
      "output too); the rest on the CPU");
  cmd->add_flag("--recheck", f.session.recheck,
                "Run the device self-check again even when its result is cached");
}

void check_device_flag(const ModelFlags& f) {
  // The spec's form and the named device's presence, before a model is loaded; the self-check
  // comes with the model (it needs the weight types).
  const DeviceSpec spec = parse_device_spec(device_spec_text(f.session.device));
  if (spec.kind == DeviceSpec::Kind::Auto || spec.kind == DeviceSpec::Kind::Cpu) return;
  ChoiceOptions c;
  c.spec = f.session.device;
  c.self_check = false;
  choose_device(Registry::global(), c);
}

void print_device_choice(const Session& s) {
  const ChosenDevice& c = s.device_choice();
  for (const auto& line : c.notes) fmt::print(stderr, "polystack: {}\n", line);
  const DeviceInfo& dev = s.device().info();
  fmt::print(stderr, "polystack: running on {} ({}): {}\n", dev.id, describe_device(dev), c.reason);
  if (!s.split().empty()) fmt::print(stderr, "polystack: split: {}\n", s.split());
  for (const auto& line : c.passed) fmt::print(stderr, "polystack: not chosen: {}\n", line);
  for (const auto& line : s.placement().fallbacks)
    fmt::print(stderr, "polystack: fallback: {}\n", line);
}

}  // namespace ps::cli
