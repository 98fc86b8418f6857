// The Vulkan backend plugin (libpolystack-backend-vulkan.so): probes the loader and drivers,
// reports every device with its facts, and opens devices that run the ops of vulkan_ops.cpp.
// Those are not yet all a model needs, so every device is reported as found but not usable for
// models, with that reason: the default policy passes over it and a session on it refuses to
// start, while the op conformance suite runs what exists.
#include <fmt/format.h>

#include "backend/backend.h"
#include "backends/vulkan/vulkan_device.h"
#include "backends/vulkan/vulkan_probe.h"
#include "core/error.h"

namespace ps::vk {
namespace {

constexpr const char* kNotForModels =
    "the Vulkan backend does not run whole models yet (get_rows, rope, copy and attention "
    "kernels are missing)";

class VulkanBackend final : public Backend {
 public:
  Api api() const override { return Api::Vulkan; }

  ProbeReport probe() override {
    ProbeReport r = vk::probe();
    for (DeviceInfo& d : r.devices)
      if (d.unusable.empty()) d.unusable = kNotForModels;
    return r;
  }

  std::unique_ptr<Device> open_device(int index, const DeviceOptions&) override {
    std::string why;
    const Instance* inst = process_instance(&why);
    if (!inst) throw BackendError(fmt::format("vulkan:{}: {}", index, why));
    std::vector<DeviceExtras> all =
        enumerate(*inst->loader, inst->handle, inst->fns, inst->version);
    if (index < 0 || size_t(index) >= all.size())
      throw BackendError(fmt::format("vulkan:{}: no such device ({} found)", index, all.size()));
    DeviceExtras& x = all[size_t(index)];
    if (!x.info.unusable.empty())  // below Vulkan 1.2
      throw BackendError(fmt::format("vulkan:{} ({}): {}", index, x.info.name, x.info.unusable));
    return std::make_unique<VulkanDevice>(*inst, x, kNotForModels);
  }
};

}  // namespace
}  // namespace ps::vk

extern "C" ps::Backend* polystack_backend_create() { return new ps::vk::VulkanBackend(); }
