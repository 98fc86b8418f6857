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

class GpuBackend final : public Backend {
 public:
  Api api() const override { return kApi; }

  ProbeReport probe() override { return probe_devices(); }

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

POLYSTACK_BACKEND_PLUGIN(new ps::gpu::GpuBackend())
