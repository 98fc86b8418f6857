// The null backend plugin (libpolystack-backend-null.so): the skeleton a new backend is copied
// from (README.md). It registers like any plugin (the entry points below), probes "no devices:
// this is the skeleton", and with POLYSTACK_NULL_DEVICES=1 opens one device that runs the
// conformance suite's structure: buffers, the ordering contract, reasons for what it lacks.
#include "backend/backend.h"

#include <fmt/format.h>

#include "backends/null/device.h"
#include "core/error.h"

namespace ps::null {
namespace {

class NullBackend final : public Backend {
 public:
  Api api() const override { return Api::Null; }

  ProbeReport probe() override { return null::probe(); }

  std::unique_ptr<Device> open_device(int index, const DeviceOptions&) override {
    ProbeReport r = null::probe();
    if (index < 0 || size_t(index) >= r.devices.size())
      throw BackendError(fmt::format("null:{}: no such device ({} found{})", index,
                                     r.devices.size(),
                                     r.reason.empty() ? "" : fmt::format("; {}", r.reason)));
    return std::make_unique<NullDevice>(std::move(r.devices[size_t(index)]));
  }
};

}  // namespace
}  // namespace ps::null

POLYSTACK_BACKEND_PLUGIN(new ps::null::NullBackend())
