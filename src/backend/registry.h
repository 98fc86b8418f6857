#pragma once
// Finds the backends of this binary (built in, or plugins next to the executable and in
// POLYSTACK_BACKEND_PATH), probes them and opens devices by id. A plugin is probed in a child
// process (probe_plugin_out_of_process) and loaded into this process only when one of its
// devices is opened, so a plugin or driver that crashes or hangs costs only its own API.
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "backend/hardware.h"

namespace ps {

class Registry {
 public:
  // Built-in backends plus the plugins found in the executable's folder and
  // POLYSTACK_BACKEND_PATH (probed out of process).
  static Registry& global();
  Registry();
  ~Registry();

  // A backend in this process (built in, or a plugin loaded with load_backend_plugins).
  void add(std::unique_ptr<Backend> backend);
  // Records why a plugin for `api` could not be used (e.g. dlopen's message).
  void note_unavailable(Api api, std::string reason);
  // A plugin file for `api`, probed in a child process and loaded here only when one of its
  // devices is opened. Ignored when the API has a backend already (the first one wins).
  void add_plugin_file(Api api, std::string path);
  // What the PCI bus shows, in place of reading it (tests: reports that do not depend on the
  // machine's hardware).
  void set_hardware(const GpuHardware& hw) { hardware_ = hw; }
  // The plugin file an API's devices come from ("" for a built-in backend or none).
  std::string plugin_file(Api api) const;

  // One report per API in kAllApis order; probes each backend once and caches. Plugins are
  // probed in child processes, all at once, each stopped after POLYSTACK_PROBE_TIMEOUT seconds
  // (default 10).
  const std::vector<ProbeReport>& probe_all();
  // The report of one API, probing only that one when the others have not been probed yet.
  const ProbeReport& probe(Api api);
  // Opens a device by id ("cpu", "vulkan:0"), loading its plugin into this process first.
  // BackendError with the probe's reason when it is absent.
  std::unique_ptr<Device> open(const std::string& device_id, const DeviceOptions& opts);

 private:
  ProbeReport probe_in_process(Api api);
  // Probes those of `apis` not probed yet: built-in backends here, plugins in child processes,
  // all at once.
  void probe_apis(std::span<const Api> apis);
  bool backend_loaded(Api api) const;
  Backend* backend_for(Api api);

  std::vector<std::unique_ptr<Backend>> backends_;
  std::map<Api, std::string> unavailable_;
  std::map<Api, std::string> plugin_files_;
  std::map<Api, ProbeReport> probed_;
  std::vector<ProbeReport> reports_;
  std::optional<GpuHardware> hardware_;  // read once, when a report first needs it
};

// Why a plugin could not be loaded, from dlopen's message: a missing library the plugin needs
// is named with what provides it (the ROCm runtime for HIP, ...).
std::string plugin_load_failure(std::string_view plugin, std::string_view dlopen_error);

// Loads one plugin file into this process; BackendError saying why it cannot be.
std::unique_ptr<Backend> load_backend_plugin(const std::string& path);
// The plugin files (libpolystack-backend-<api>.so) in `dir`, by API.
std::map<Api, std::string> find_backend_plugins(const std::string& dir);
// Loads every plugin in `dir` into this process (tests; the child that probes one plugin).
void load_backend_plugins(Registry& registry, const std::string& dir);

// Probes the plugin at `path` in a child process (see child_process.h): its report, or one
// marked failed saying what happened ("the opencl plugin crashed while loading (signal 11)").
std::vector<ProbeReport> probe_plugins_out_of_process(
    const std::vector<std::pair<Api, std::string>>& plugins, double timeout_s);
// The child's side: loads the plugin at `path`, probes it and reports. Returns the exit code.
int probe_child_main(const std::string& path);

}  // namespace ps
