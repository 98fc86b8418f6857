#include "backend/registry.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "backend/child_process.h"
#include "backend/probe_json.h"
#include "backends/builtin.h"
#include "core/error.h"

namespace ps {

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

}  // namespace

Registry::Registry() = default;
Registry::~Registry() = default;

Registry& Registry::global() {
  static Registry* r = [] {
    auto* reg = new Registry();
    register_builtin_backends(*reg);
    const std::string exe = executable_dir();
    if (!exe.empty())
      for (auto& [api, path] : find_backend_plugins(exe)) reg->add_plugin_file(api, path);
    if (const char* extra = std::getenv("POLYSTACK_BACKEND_PATH"))
      for (auto& [api, path] : find_backend_plugins(extra)) reg->add_plugin_file(api, path);
    return reg;
  }();
  return *r;
}

void Registry::add(std::unique_ptr<Backend> backend) {
  const Api api = backend->api();
  for (const auto& b : backends_)
    if (b->api() == api) return;  // first one wins (built-in before plugins)
  unavailable_.erase(api);
  plugin_files_.erase(api);
  backends_.push_back(std::move(backend));
  probed_.erase(api);
  reports_.clear();
}

void Registry::note_unavailable(Api api, std::string reason) {
  for (const auto& b : backends_)
    if (b->api() == api) return;
  unavailable_[api] = std::move(reason);
  probed_.erase(api);
  reports_.clear();
}

void Registry::add_plugin_file(Api api, std::string path) {
  for (const auto& b : backends_)
    if (b->api() == api) return;
  if (plugin_files_.count(api)) return;
  plugin_files_[api] = std::move(path);
  probed_.erase(api);
  reports_.clear();
}

std::string Registry::plugin_file(Api api) const {
  auto it = plugin_files_.find(api);
  return it == plugin_files_.end() ? std::string() : it->second;
}

ProbeReport Registry::probe_in_process(Api api) {
  ProbeReport r;
  r.api = api;
  auto it = std::find_if(backends_.begin(), backends_.end(),
                         [&](const auto& b) { return b->api() == api; });
  if (it == backends_.end()) {
    auto u = unavailable_.find(api);
    r.reason = u != unavailable_.end() ? u->second : not_built_reason(api);
    return r;
  }
  try {
    r = (*it)->probe();
  } catch (const std::exception& e) {
    r = ProbeReport{};
    r.reason = std::string("probe failed: ") + e.what();
    r.failed = true;
  }
  r.api = api;
  r.built = true;
  if (r.devices.empty() && r.reason.empty()) r.reason = "no device found";
  return r;
}

void Registry::probe_apis(std::span<const Api> apis) {
  std::vector<std::pair<Api, std::string>> plugins;
  for (Api api : apis) {
    if (probed_.count(api)) continue;
    if (auto f = plugin_files_.find(api); f != plugin_files_.end() && !backend_loaded(api))
      plugins.emplace_back(api, f->second);
    else
      probed_[api] = probe_in_process(api);
  }
  if (!plugins.empty()) {
    const double timeout = seconds_from_env("POLYSTACK_PROBE_TIMEOUT", 10);
    std::vector<ProbeReport> got = probe_plugins_out_of_process(plugins, timeout);
    for (size_t i = 0; i < plugins.size(); ++i) probed_[plugins[i].first] = std::move(got[i]);
  }
  for (Api api : apis) {
    ProbeReport& r = probed_.at(api);
    if (!r.devices.empty() || r.no_hardware) continue;
    if (!hardware_) hardware_ = scan_gpu_hardware();
    explain_with_hardware(r, *hardware_);
  }
}

const std::vector<ProbeReport>& Registry::probe_all() {
  if (reports_.size() == std::size(kAllApis)) return reports_;
  probe_apis(kAllApis);
  reports_.clear();
  for (Api api : kAllApis) reports_.push_back(probed_.at(api));
  return reports_;
}

const ProbeReport& Registry::probe(Api api) {
  probe_apis(std::span<const Api>(&api, 1));
  return probed_.at(api);
}

bool Registry::backend_loaded(Api api) const {
  return std::any_of(backends_.begin(), backends_.end(),
                     [&](const auto& b) { return b->api() == api; });
}

Backend* Registry::backend_for(Api api) {
  for (const auto& b : backends_)
    if (b->api() == api) return b.get();
  auto f = plugin_files_.find(api);
  if (f == plugin_files_.end()) return nullptr;
  // Its probe ran in a child that survived loading it: now it is loaded here.
  backends_.push_back(load_backend_plugin(f->second));
  return backends_.back().get();
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
  for (Api api : kAllApis) {
    if (api_name(api) != api_part) continue;
    const ProbeReport& r = probe(api);
    if (!r.built || r.devices.empty())
      throw BackendError(fmt::format("device '{}' is not available: {}", device_id, r.reason));
    if (index >= int(r.devices.size()))
      throw BackendError(fmt::format("device '{}' does not exist: {} has {} device(s)", device_id,
                                     api_part, r.devices.size()));
    Backend* b = backend_for(api);
    if (!b) throw BackendError(fmt::format("device '{}': no backend for {}", device_id, api_part));
    return b->open_device(index, opts);
  }
  std::string known;
  for (Api a : kAllApis) known += fmt::format("{}{}", known.empty() ? "" : ", ", api_name(a));
  throw BackendError(
      fmt::format("unknown device '{}' (APIs are {}; see 'polystack devices')", device_id, known));
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

std::unique_ptr<Backend> load_backend_plugin(const std::string& path) {
  const std::string file = std::filesystem::path(path).filename().string();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    throw BackendError(plugin_load_failure(file, err ? err : "?"));
  }
  auto abi = reinterpret_cast<BackendAbiFn>(dlsym(handle, kBackendAbiSymbol));
  if (!abi || abi() != kBackendAbiVersion)
    throw BackendError(fmt::format(
        "plugin {} was built for another version of polystack (backend ABI {}, this one has {}); "
        "rebuild it or remove it",
        file, abi ? std::to_string(abi()) : std::string("unknown"), kBackendAbiVersion));
  auto create = reinterpret_cast<BackendCreateFn>(dlsym(handle, kBackendCreateSymbol));
  if (!create)
    throw BackendError(fmt::format("plugin {} has no {} symbol", file, kBackendCreateSymbol));
  // The handle stays open for the life of the process: the backend's code lives in it.
  std::unique_ptr<Backend> b(create());
  if (!b) throw BackendError(fmt::format("plugin {} created no backend", file));
  return b;
}

std::map<Api, std::string> find_backend_plugins(const std::string& dir) {
  std::map<Api, std::string> out;
  for (Api api : kAllApis) {
    if (api == Api::Cpu) continue;
    const auto path =
        std::filesystem::path(dir) / fmt::format("libpolystack-backend-{}.so", api_name(api));
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) out[api] = path.string();
  }
  return out;
}

void load_backend_plugins(Registry& registry, const std::string& dir) {
  for (auto& [api, path] : find_backend_plugins(dir)) {
    try {
      registry.add(load_backend_plugin(path));
    } catch (const BackendError& e) {
      registry.note_unavailable(api, e.what());
    }
  }
}

namespace {

Api plugin_api(const std::string& path) {
  const std::string file = std::filesystem::path(path).filename().string();
  for (Api api : kAllApis)
    if (file == fmt::format("libpolystack-backend-{}.so", api_name(api))) return api;
  throw UsageError(fmt::format("{}: not a backend plugin's file name", path));
}

}  // namespace

int probe_child_main(const std::string& path) {
  const Api api = plugin_api(path);
  write_report_line(nlohmann::json{{"stage", "loading"}}.dump());
  ProbeReport r;
  r.api = api;
  std::unique_ptr<Backend> backend;
  try {
    backend = load_backend_plugin(path);
  } catch (const BackendError& e) {
    r.reason = e.what();  // not built: a missing library is data, not a failure of the probe
  }
  if (backend) {
    write_report_line(nlohmann::json{{"stage", "probing"}}.dump());
    Registry reg;
    reg.set_hardware(GpuHardware{});  // the probe's own words: the parent reads the hardware
    reg.add(std::move(backend));
    r = reg.probe(api);
  }
  write_report_line(nlohmann::json{{"report", to_json(r)}}.dump());
  return 0;
}

std::vector<ProbeReport> probe_plugins_out_of_process(
    const std::vector<std::pair<Api, std::string>>& plugins, double timeout_s) {
  std::vector<std::vector<std::string>> args;
  for (const auto& [api, path] : plugins) args.push_back({"__probe", path});
  const std::vector<ChildResult> results = run_children(self_executable(), args, timeout_s);
  std::vector<ProbeReport> out;
  for (size_t i = 0; i < plugins.size(); ++i) {
    const ChildResult& c = results[i];
    const Api api = plugins[i].first;
    ProbeReport r;
    std::string stage = "loading";
    bool have_report = false;
    std::string bad_line;
    for (const std::string& line : c.lines) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("stage") && j["stage"].is_string())
        stage = j["stage"].get<std::string>();
      else if (j.is_object() && j.contains("report")) {
        try {
          r = probe_report_from_json(j["report"]);
          have_report = r.api == api;
          if (!have_report) bad_line = "a report for another API";
        } catch (const BackendError& e) {
          bad_line = e.what();
        }
      } else {
        bad_line = "a line that is not a report";
      }
    }
    if (have_report && c.exited_cleanly()) {
      out.push_back(std::move(r));
      continue;
    }
    r = ProbeReport{};
    r.api = api;
    r.built = true;
    r.failed = true;
    if (!bad_line.empty() && c.exited_cleanly())
      r.reason = fmt::format("the {} plugin's probe sent {}", api_name(api), bad_line);
    else
      r.reason =
          fmt::format("the {} plugin {}", api_name(api),
                      c.failure(timeout_s, have_report ? "after probing" : "while " + stage));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ps
