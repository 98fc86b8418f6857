// The Vulkan backend plugin (libpolystack-backend-vulkan.so): probes the loader and drivers,
// reports every device with its facts, and opens devices that run every op of the engine
// (ops.cpp). Whether the default policy trusts a device is the self-check's to say.
#include "backend/backend.h"

#include <fmt/format.h>

#include "backends/vulkan/device.h"
#include "backends/vulkan/probe.h"
#include "core/error.h"

namespace ps::vk {
namespace {

class VulkanBackend final : public Backend {
 public:
  Api api() const override { return Api::Vulkan; }

  ProbeReport probe() override { return vk::probe(); }

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
    return std::make_unique<VulkanDevice>(*inst, x);
  }
};

}  // namespace
}  // namespace ps::vk

POLYSTACK_BACKEND_PLUGIN(new ps::vk::VulkanBackend())
