// The OpenCL backend plugin (libpolystack-backend-opencl.so): probes the ICD loader and its
// drivers, reports every device with its facts, and opens devices that run every op and weight
// type (ops.cpp, kernels/). Whether the default policy trusts a device is the self-check's to
// say; a CPU driver such as PoCL is never chosen by default.
#include "backend/backend.h"

#include <fmt/format.h>

#include "backends/opencl/device.h"
#include "backends/opencl/probe.h"
#include "core/error.h"

namespace ps::ocl {
namespace {

class OpenClBackend final : public Backend {
 public:
  Api api() const override { return Api::OpenCL; }

  ProbeReport probe() override { return ocl::probe(); }

  std::unique_ptr<Device> open_device(int index, const DeviceOptions&) override {
    std::string why;
    const Functions* f = functions(&why);
    if (!f) throw BackendError(fmt::format("opencl:{}: {}", index, why));
    std::vector<DeviceExtras> all = enumerate(*f, &why);
    if (index < 0 || size_t(index) >= all.size())
      throw BackendError(fmt::format("opencl:{}: no such device ({} found{})", index, all.size(),
                                     all.empty() ? "; " + why : std::string()));
    DeviceExtras& x = all[size_t(index)];
    if (!x.info.unusable.empty())
      throw BackendError(fmt::format("opencl:{} ({}): {}", index, x.info.name, x.info.unusable));
    return std::make_unique<OclDevice>(*f, std::move(x));
  }
};

}  // namespace
}  // namespace ps::ocl

POLYSTACK_BACKEND_PLUGIN(new ps::ocl::OpenClBackend())
