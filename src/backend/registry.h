#pragma once
// Finds the backends of this binary (built in, or plugins next to the executable), probes
// them, opens devices by id and explains the default choice.
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"

namespace ps {

struct DeviceChoice {
  std::string device_id;            // "cpu", "vulkan:0"
  std::string reason;               // why this one, in words
  std::vector<std::string> passed;  // devices not chosen, each with why
};

class Registry {
 public:
  // Built-in backends plus plugins found in the executable's folder and POLYSTACK_BACKEND_PATH.
  static Registry& global();
  Registry();
  ~Registry();

  void add(std::unique_ptr<Backend> backend);
  // Records why a plugin for `api` could not be used (e.g. dlopen's message).
  void note_unavailable(Api api, std::string reason);

  // One report per API in kAllApis order; probes each backend once and caches.
  const std::vector<ProbeReport>& probe_all();
  // Opens a device by id ("cpu", "vulkan:0", "vulkan" = its first device). BackendError with
  // the probe's reason when it is absent.
  std::unique_ptr<Device> open(const std::string& device_id, const DeviceOptions& opts);
  // The default policy: discrete > integrated > other GPU > CPU; native API before a portable
  // one for the same physical device (by uuid).
  DeviceChoice choose_default();

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
  std::map<Api, std::string> unavailable_;
  std::vector<ProbeReport> reports_;
  bool probed_ = false;
};

// Why a plugin could not be loaded, from dlopen's message: a missing library the plugin needs
// is named with what provides it (the ROCm runtime for HIP, ...).
std::string plugin_load_failure(std::string_view plugin, std::string_view dlopen_error);

// Loads backend plugins (libpolystack-backend-<api>.so) from `dir` into `registry`.
void load_backend_plugins(Registry& registry, const std::string& dir);

}  // namespace ps
