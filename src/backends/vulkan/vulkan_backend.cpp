// The Vulkan backend plugin (libpolystack-backend-vulkan.so): probes the loader and drivers
// and reports every device with its facts. Kernels are not implemented yet, so every device is
// reported as found but not usable, with that reason: the default policy passes over it and
// `--device vulkan:N` fails with the same words instead of running anything.
#include <fmt/format.h>

#include "backend/backend.h"
#include "backends/vulkan/vulkan_probe.h"
#include "core/error.h"

namespace ps::vk {
namespace {

constexpr const char* kNoKernels = "the Vulkan backend has no kernels yet";

class VulkanBackend final : public Backend {
 public:
  Api api() const override { return Api::Vulkan; }

  ProbeReport probe() override {
    ProbeReport r = vk::probe();
    for (DeviceInfo& d : r.devices)
      if (d.unusable.empty()) d.unusable = kNoKernels;
    return r;
  }

  std::unique_ptr<Device> open_device(int index, const DeviceOptions&) override {
    const ProbeReport r = probe();
    if (index < 0 || size_t(index) >= r.devices.size())
      throw BackendError(
          fmt::format("vulkan:{}: no such device ({})", index,
                      r.devices.empty() ? r.reason : fmt::format("{} found", r.devices.size())));
    throw BackendError(fmt::format("vulkan:{} ({}) cannot run models: {}", index,
                                   r.devices[size_t(index)].name,
                                   r.devices[size_t(index)].unusable));
  }
};

}  // namespace
}  // namespace ps::vk

extern "C" ps::Backend* polystack_backend_create() { return new ps::vk::VulkanBackend(); }
