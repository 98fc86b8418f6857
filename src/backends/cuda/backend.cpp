// The CUDA backend plugin (libpolystack-backend-cuda.so), or, built by hipcc from the same
// sources, the HIP one (libpolystack-backend-hip.so). The CUDA plugin links the CUDA runtime
// statically and opens the driver (libcuda.so.1) only at run time, so it loads on machines
// without an NVIDIA driver and its probe says so.
#include "backend/backend.h"

#include <fmt/format.h>

#include "backends/cuda/device.h"
#include "backends/cuda/probe.h"
#include "core/error.h"

namespace ps::gpu {
namespace {

#if defined(POLYSTACK_HIP)
constexpr Api kApi = Api::Hip;
#else
constexpr Api kApi = Api::Cuda;
#endif

// Until scripts/device-check has passed on such hardware, the default policy leaves these
// devices to be asked for by name.
constexpr const char* kNotDefault =
    "polystack's {} kernels have not yet been verified on a GPU; run on this device with "
    "--device {}";

class GpuBackend final : public Backend {
 public:
  Api api() const override { return kApi; }

  ProbeReport probe() override {
    ProbeReport r = probe_devices();
    for (DeviceInfo& d : r.devices)
      if (d.unusable.empty()) d.not_default = fmt::format(kNotDefault, api_name(kApi), d.id);
    return r;
  }

  std::unique_ptr<Device> open_device(int index, const DeviceOptions&) override {
    ProbeReport r = probe();
    const std::string id = fmt::format("{}:{}", api_name(kApi), index);
    if (index < 0 || size_t(index) >= r.devices.size())
      throw BackendError(r.devices.empty()
                             ? fmt::format("{}: {}", id, r.reason)
                             : fmt::format("{}: no such device ({} found)", id, r.devices.size()));
    DeviceInfo& d = r.devices[size_t(index)];
    if (!d.unusable.empty()) throw BackendError(fmt::format("{} ({}): {}", id, d.name, d.unusable));
    return std::make_unique<GpuDevice>(d, index);
  }
};

}  // namespace
}  // namespace ps::gpu

extern "C" ps::Backend* polystack_backend_create() { return new ps::gpu::GpuBackend(); }
