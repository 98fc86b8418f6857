// A backend plugin for the registry tests: one fake discrete GPU that reports itself through
// the OpenCL slot. It proves the plugin path end to end (dlopen, the create symbol, probe).
// Built a second time with PS_FAKE_OTHER_ABI, it says it was built for another backend ABI, as
// a plugin left over from an older polystack would.
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

#ifdef PS_FAKE_OTHER_ABI
extern "C" ps::Backend* polystack_backend_create() { return new FakeBackend(); }
extern "C" int polystack_backend_abi() { return ps::kBackendAbiVersion - 1; }
#else
POLYSTACK_BACKEND_PLUGIN(new FakeBackend())
#endif
