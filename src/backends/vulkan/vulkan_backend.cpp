// The Vulkan backend plugin (libpolystack-backend-vulkan.so): probes the loader and drivers,
// reports every device with its facts, and opens devices that run every op of the engine
// (vulkan_ops.cpp). The kernels are straightforward and checked on lavapipe only, so the
// default policy does not pick a Vulkan device by itself yet; `--device vulkan:N` runs on it.
#include <fmt/format.h>

#include "backend/backend.h"
#include "backends/vulkan/vulkan_device.h"
#include "backends/vulkan/vulkan_probe.h"
#include "core/error.h"

namespace ps::vk {
namespace {

constexpr const char* kNotDefault =
    "polystack's Vulkan kernels are simple ones, checked on lavapipe only; run on this device "
    "with --device";

class VulkanBackend final : public Backend {
 public:
  Api api() const override { return Api::Vulkan; }

  ProbeReport probe() override {
    ProbeReport r = vk::probe();
    for (DeviceInfo& d : r.devices)
      if (d.unusable.empty()) d.not_default = kNotDefault;
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
    x.info.not_default = kNotDefault;
    return std::make_unique<VulkanDevice>(*inst, x);
  }
};

}  // namespace
}  // namespace ps::vk

extern "C" ps::Backend* polystack_backend_create() { return new ps::vk::VulkanBackend(); }
