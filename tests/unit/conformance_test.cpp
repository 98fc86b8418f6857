// The op conformance suite: every op, over the dtypes it takes and awkward shapes, on random
// data, run on every device the registry can open, against the CPU backend. A device's
// unsupported ops are not failures: they are listed, each with the device's reason. Devices
// other than the CPU come from the plugins beside the test binary (lavapipe for Vulkan in CI).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "conformance_cases.h"
#include "core/error.h"

namespace ps {
namespace {

using conformance::all_cases;
using conformance::Case;
using conformance::run_on;

// POLYSTACK_CONFORMANCE_APIS=vulkan,opencl: only those APIs' devices besides the CPU (each
// ctest variant of one backend runs its own); unset: every device the registry opens.
bool api_selected(Api api) {
  const char* list = std::getenv("POLYSTACK_CONFORMANCE_APIS");
  if (!list || !*list) return true;
  const std::string l = fmt::format(",{},", list);
  return l.find(fmt::format(",{},", api_name(api))) != std::string::npos;
}

struct OpenDevice {
  std::string id;
  std::unique_ptr<Device> device;
};

TEST(Conformance, EveryDeviceMatchesTheCpuBackendOrSaysWhyNot) {
  Registry& reg = Registry::global();
  std::unique_ptr<Device> cpu = reg.open("cpu", DeviceOptions{});
  std::vector<OpenDevice> others;
  std::vector<std::string> not_opened;
  for (const ProbeReport& r : reg.probe_all()) {
    if (r.api == Api::Cpu || !api_selected(r.api)) continue;
    if (r.devices.empty()) not_opened.push_back(fmt::format("{}: {}", api_name(r.api), r.reason));
    for (const DeviceInfo& d : r.devices) {
      try {
        others.push_back({d.id, reg.open(d.id, DeviceOptions{})});
      } catch (const BackendError& e) {
        not_opened.push_back(fmt::format("{}: {}", d.id, e.what()));
      }
    }
  }
  for (const auto& line : not_opened) std::printf("not tested: %s\n", line.c_str());
  if (others.empty()) GTEST_SKIP() << "no device besides the CPU could be opened here";

  std::vector<std::unique_ptr<Case>> cases = all_cases();
  for (OpenDevice& od : others) {
    std::map<std::string, std::string> unsupported;  // case -> reason
    int compared = 0;
    for (auto& c : cases) {
      std::string why;
      for (Tensor* n : c->graph.nodes())
        if (why.empty()) why = od.device->unsupported_reason(*n);
      if (!why.empty()) {
        unsupported[c->name] = why;
        continue;
      }
      SCOPED_TRACE(od.id + ": " + c->name);
      const std::vector<float> want = run_on(*cpu, *c);
      const std::vector<float> got = run_on(*od.device, *c);
      for (const std::string& m : conformance::mismatches(*c, want, got))
        ADD_FAILURE() << od.id << ": " << m;
      ++compared;
    }
    std::printf("%s: %d cases match the CPU backend; %zu not supported:\n", od.id.c_str(), compared,
                unsupported.size());
    for (const auto& [name, why] : unsupported)
      std::printf("  %-40s %s\n", name.c_str(), why.c_str());
    EXPECT_GT(compared, 0) << od.id << " supports none of the cases";
  }
}

// backend.h's ordering of read/write/write_async against execute() and synchronize(), on the
// CPU and on every other device the registry opens.
TEST(Conformance, EveryDeviceKeepsTheOrderingContract) {
  Registry& reg = Registry::global();
  std::vector<std::string> ids = {"cpu"};
  for (const ProbeReport& r : reg.probe_all())
    if (r.api != Api::Cpu && api_selected(r.api))
      for (const DeviceInfo& d : r.devices) ids.push_back(d.id);
  for (const std::string& id : ids) {
    std::unique_ptr<Device> dev;
    try {
      dev = reg.open(id, DeviceOptions{});
    } catch (const BackendError& e) {
      std::printf("not tested: %s: %s\n", id.c_str(), e.what());
      continue;
    }
    for (const std::string& p : conformance::ordering_problems(*dev))
      ADD_FAILURE() << id << ": " << p;
    std::printf("%s: ordering checked\n", id.c_str());
  }
}

}  // namespace
}  // namespace ps
