#include "backend/registry.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace ps {

// Defined with the backends that are compiled into this binary.
void register_builtin_backends(Registry& registry);

std::string_view api_name(Api api) {
  switch (api) {
    case Api::Cpu:
      return "cpu";
    case Api::Cuda:
      return "cuda";
    case Api::Hip:
      return "hip";
    case Api::Metal:
      return "metal";
    case Api::Vulkan:
      return "vulkan";
    case Api::OpenCL:
      return "opencl";
    case Api::DirectML:
      return "directml";
  }
  return "?";
}

std::string_view device_kind_name(DeviceKind k) {
  switch (k) {
    case DeviceKind::Cpu:
      return "cpu";
    case DeviceKind::DiscreteGpu:
      return "discrete gpu";
    case DeviceKind::IntegratedGpu:
      return "integrated gpu";
    case DeviceKind::VirtualGpu:
      return "virtual gpu";
    case DeviceKind::Accelerator:
      return "accelerator";
  }
  return "?";
}

namespace {

std::string executable_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.parent_path().string();
}

std::string not_built_reason(Api api) {
  switch (api) {
    case Api::Metal:
      return "not built into this binary (Metal exists only on Apple platforms)";
    case Api::DirectML:
      return "not built into this binary (DirectML exists only on Windows)";
    default:
      return fmt::format(
          "not built into this binary (no {} backend plugin, "
          "libpolystack-backend-{}.so, next to the executable)",
          api_name(api), api_name(api));
  }
}

int kind_rank(DeviceKind k) {
  switch (k) {
    case DeviceKind::DiscreteGpu:
      return 0;
    case DeviceKind::IntegratedGpu:
      return 1;
    case DeviceKind::Accelerator:
      return 2;
    case DeviceKind::VirtualGpu:
      return 3;
    case DeviceKind::Cpu:
      return 4;
  }
  return 5;
}

int api_rank(Api a) {
  switch (a) {
    case Api::Cuda:
    case Api::Hip:
    case Api::Metal:
      return 0;
    case Api::Vulkan:
      return 1;
    case Api::DirectML:
      return 2;
    case Api::OpenCL:
      return 3;
    case Api::Cpu:
      return 4;
  }
  return 5;
}

}  // namespace

Registry::Registry() = default;
Registry::~Registry() = default;

Registry& Registry::global() {
  static Registry* r = [] {
    auto* reg = new Registry();
    register_builtin_backends(*reg);
    const std::string exe = executable_dir();
    if (!exe.empty()) load_backend_plugins(*reg, exe);
    if (const char* extra = std::getenv("POLYSTACK_BACKEND_PATH"))
      load_backend_plugins(*reg, extra);
    return reg;
  }();
  return *r;
}

void Registry::add(std::unique_ptr<Backend> backend) {
  const Api api = backend->api();
  for (const auto& b : backends_)
    if (b->api() == api) return;  // first one wins (built-in before plugins)
  unavailable_.erase(api);
  backends_.push_back(std::move(backend));
  probed_ = false;
}

void Registry::note_unavailable(Api api, std::string reason) {
  for (const auto& b : backends_)
    if (b->api() == api) return;
  unavailable_[api] = std::move(reason);
  probed_ = false;
}

const std::vector<ProbeReport>& Registry::probe_all() {
  if (probed_) return reports_;
  reports_.clear();
  for (Api api : kAllApis) {
    auto it = std::find_if(backends_.begin(), backends_.end(),
                           [&](const auto& b) { return b->api() == api; });
    ProbeReport r;
    if (it != backends_.end()) {
      try {
        r = (*it)->probe();
      } catch (const std::exception& e) {
        r = ProbeReport{};
        r.reason = std::string("probe failed: ") + e.what();
      }
      r.api = api;
      r.built = true;
      if (r.devices.empty() && r.reason.empty()) r.reason = "no device found";
    } else {
      r.api = api;
      r.built = false;
      auto u = unavailable_.find(api);
      r.reason = u != unavailable_.end() ? u->second : not_built_reason(api);
    }
    reports_.push_back(std::move(r));
  }
  probed_ = true;
  return reports_;
}

std::unique_ptr<Device> Registry::open(const std::string& device_id, const DeviceOptions& opts) {
  std::string api_part = device_id;
  int index = 0;
  if (auto colon = device_id.find(':'); colon != std::string::npos) {
    api_part = device_id.substr(0, colon);
    const std::string idx = device_id.substr(colon + 1);
    char* end = nullptr;
    const long v = std::strtol(idx.c_str(), &end, 10);
    if (idx.empty() || *end != '\0' || v < 0 || v > 1024)
      throw BackendError(fmt::format("device '{}': '{}' is not a device index", device_id, idx));
    index = int(v);
  }
  const auto& reports = probe_all();
  for (const auto& r : reports) {
    if (api_name(r.api) != api_part) continue;
    if (!r.built || r.devices.empty())
      throw BackendError(fmt::format("device '{}' is not available: {}", device_id, r.reason));
    if (index >= int(r.devices.size()))
      throw BackendError(fmt::format("device '{}' does not exist: {} has {} device(s)", device_id,
                                     api_part, r.devices.size()));
    for (const auto& b : backends_)
      if (b->api() == r.api) return b->open_device(index, opts);
  }
  std::string known;
  for (Api a : kAllApis) known += fmt::format("{}{}", known.empty() ? "" : ", ", api_name(a));
  throw BackendError(
      fmt::format("unknown device '{}' (APIs are {}; see 'polystack devices')", device_id, known));
}

DeviceChoice Registry::choose_default() {
  const auto& reports = probe_all();
  std::vector<const DeviceInfo*> all;
  std::vector<std::string> unusable;
  for (const auto& r : reports)
    for (const auto& d : r.devices) {
      if (d.unusable.empty() && d.not_default.empty())
        all.push_back(&d);
      else
        unusable.push_back(fmt::format("{} ({}): {}", d.id, d.name,
                                       d.unusable.empty() ? d.not_default : d.unusable));
    }
  if (all.empty()) throw BackendError("no usable device found at all (not even the CPU)");
  std::stable_sort(all.begin(), all.end(), [](const DeviceInfo* a, const DeviceInfo* b) {
    if (kind_rank(a->kind) != kind_rank(b->kind)) return kind_rank(a->kind) < kind_rank(b->kind);
    // A GPU API's driver that runs on the CPU (lavapipe, PoCL) only adds overhead to the CPU.
    if (a->kind == DeviceKind::Cpu && (a->api == Api::Cpu) != (b->api == Api::Cpu))
      return a->api == Api::Cpu;
    if (a->memory_total != b->memory_total) return a->memory_total > b->memory_total;
    return api_rank(a->api) < api_rank(b->api);
  });
  DeviceChoice c;
  const DeviceInfo* best = all.front();
  c.device_id = best->id;
  if (best->kind == DeviceKind::Cpu) {
    std::vector<std::string> why;
    for (const auto& r : reports)
      if (r.api != Api::Cpu && r.devices.empty())
        why.push_back(fmt::format("{}: {}", api_name(r.api), r.reason));
    const bool other_usable =
        std::any_of(all.begin(), all.end(), [](const DeviceInfo* d) { return d->api != Api::Cpu; });
    c.reason = other_usable ? "the CPU backend ranks above the other devices found, which run on "
                              "the CPU too"
                            : "no GPU is usable";
    c.passed = why;
  } else {
    c.reason = fmt::format("{} is a {}{}", best->name, device_kind_name(best->kind),
                           all.size() > 1 ? ", the highest-ranked device found" : "");
  }
  for (const std::string& u : unusable) c.passed.push_back(u);
  for (size_t i = 1; i < all.size(); ++i) {
    const DeviceInfo* d = all[i];
    if (!best->uuid.empty() && d->uuid == best->uuid)
      c.passed.push_back(
          fmt::format("{}: same device as {}, whose API ranks higher", d->id, best->id));
    else if (d->kind != DeviceKind::Cpu || best->kind != DeviceKind::Cpu)
      c.passed.push_back(fmt::format("{}: {} ranks below {}", d->id, device_kind_name(d->kind),
                                     device_kind_name(best->kind)));
  }
  return c;
}

std::string plugin_load_failure(std::string_view plugin, std::string_view err) {
  // glibc: "<library>: cannot open shared object file: No such file or directory"
  constexpr std::string_view kMissing = ": cannot open shared object file";
  const size_t at = err.find(kMissing);
  if (at == std::string_view::npos)
    return fmt::format("plugin {} could not be loaded: {}", plugin, err);
  const std::string_view lib = err.substr(0, at);
  struct Hint {
    std::string_view prefix, what;
  };
  static constexpr Hint kHints[] = {
      {"libamdhip64", "the ROCm HIP runtime; Debian and Ubuntu: libamdhip64-5, or AMD's ROCm"},
      {"libhsa-runtime64", "the ROCm runtime; Debian and Ubuntu: libhsa-runtime64-1"},
      {"libOpenCL", "the OpenCL ICD loader; Debian and Ubuntu: ocl-icd-libopencl1"},
      {"libvulkan", "the Vulkan loader; Debian and Ubuntu: libvulkan1"},
  };
  for (const Hint& h : kHints)
    if (lib.starts_with(h.prefix))
      return fmt::format("plugin {} needs {}, which is not installed ({})", plugin, lib, h.what);
  return fmt::format("plugin {} needs {}, which is not installed", plugin, lib);
}

void load_backend_plugins(Registry& registry, const std::string& dir) {
  for (Api api : kAllApis) {
    if (api == Api::Cpu) continue;
    const auto path =
        std::filesystem::path(dir) / fmt::format("libpolystack-backend-{}.so", api_name(api));
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* err = dlerror();
      registry.note_unavailable(api,
                                plugin_load_failure(path.filename().string(), err ? err : "?"));
      continue;
    }
    auto create = reinterpret_cast<BackendCreateFn>(dlsym(handle, kBackendCreateSymbol));
    if (!create) {
      registry.note_unavailable(api, fmt::format("plugin {} has no {} symbol",
                                                 path.filename().string(), kBackendCreateSymbol));
      continue;
    }
    // The handle stays open for the life of the process: the backend's code lives in it.
    registry.add(std::unique_ptr<Backend>(create()));
  }
}

}  // namespace ps
