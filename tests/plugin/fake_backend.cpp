// A backend plugin for the registry tests: one fake discrete GPU that reports itself through
// the OpenCL slot. It proves the plugin path end to end (dlopen, the create symbol, probe).
#include "backend/backend.h"
#include "core/error.h"

namespace {

class FakeBackend final : public ps::Backend {
 public:
  ps::Api api() const override { return ps::Api::OpenCL; }
  ps::ProbeReport probe() override {
    ps::ProbeReport r;
    r.api = ps::Api::OpenCL;
    r.built = true;
    ps::DeviceInfo d;
    d.id = "opencl:0";
    d.api = ps::Api::OpenCL;
    d.kind = ps::DeviceKind::DiscreteGpu;
    d.name = "Fake GPU";
    d.vendor = "Test";
    d.memory_total = 8ull << 30;
    d.uuid = "fake-uuid-0";
    r.devices.push_back(d);
    return r;
  }
  std::unique_ptr<ps::Device> open_device(int, const ps::DeviceOptions&) override {
    throw ps::BackendError("opencl:0: the fake GPU cannot run anything");
  }
};

}  // namespace

POLYSTACK_BACKEND_PLUGIN(new FakeBackend())
