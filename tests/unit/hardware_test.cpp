// A probe's reason said in terms of the hardware the PCI bus shows (backend/hardware.h), and the
// policy keeping APIs whose hardware is absent out of the devices passed over.
#include "backend/hardware.h"

#include <gtest/gtest.h>

#include "backend/policy.h"
#include "core/error.h"

namespace ps {
namespace {

ProbeReport no_device(Api api, const std::string& reason, bool built = true) {
  ProbeReport r;
  r.api = api;
  r.built = built;
  r.reason = reason;
  return r;
}

TEST(Hardware, NoNvidiaGpuIsNotAMissingDriver) {
  GpuHardware hw;
  hw.known = true;
  ProbeReport r = no_device(Api::Cuda, "no NVIDIA driver: libcuda.so.1 not found (install it)");
  explain_with_hardware(r, hw);
  EXPECT_EQ(r.reason, "no NVIDIA GPU on this machine");
  EXPECT_TRUE(r.no_hardware);
  EXPECT_EQ(r.detail, "no NVIDIA driver: libcuda.so.1 not found (install it)");
  ProbeReport h = no_device(Api::Hip, "no AMD GPU: /dev/kfd is missing");
  explain_with_hardware(h, hw);
  EXPECT_EQ(h.reason, "no AMD GPU on this machine");
}

TEST(Hardware, AGpuOnTheBusKeepsTheAdvice) {
  GpuHardware hw;
  hw.known = hw.nvidia = hw.any_gpu = true;
  ProbeReport r = no_device(Api::Cuda, "no NVIDIA driver: install the NVIDIA driver");
  explain_with_hardware(r, hw);
  EXPECT_EQ(r.reason, "no NVIDIA driver: install the NVIDIA driver");
  EXPECT_FALSE(r.no_hardware);
  // An NVIDIA machine has no AMD GPU.
  ProbeReport h = no_device(Api::Hip, "no AMD GPU: /dev/kfd is missing");
  explain_with_hardware(h, hw);
  EXPECT_TRUE(h.no_hardware);
  // Vulkan with no device beside a GPU: its own reason.
  ProbeReport v = no_device(Api::Vulkan, "no Vulkan driver for it");
  explain_with_hardware(v, hw);
  EXPECT_FALSE(v.no_hardware);
}

TEST(Hardware, UnknownBusCrashesAndDevicesStayAsProbed) {
  ProbeReport r = no_device(Api::Cuda, "install the NVIDIA driver");
  explain_with_hardware(r, GpuHardware{});  // the bus could not be read
  EXPECT_FALSE(r.no_hardware);
  GpuHardware hw;
  hw.known = true;
  ProbeReport crash = no_device(Api::Cuda, "the cuda plugin crashed while loading (signal 11)");
  crash.failed = true;
  explain_with_hardware(crash, hw);
  EXPECT_TRUE(crash.failed);
  EXPECT_FALSE(crash.no_hardware);
  ProbeReport with;
  with.api = Api::Cuda;
  with.built = true;
  with.devices.push_back(DeviceInfo{});
  explain_with_hardware(with, hw);
  EXPECT_FALSE(with.no_hardware);
}

TEST(Hardware, MetalAndDirectMLAreNotOnLinux) {
#if defined(__linux__)
  ProbeReport m = no_device(Api::Metal, "not built into this binary", false);
  explain_with_hardware(m, GpuHardware{});
  EXPECT_EQ(m.reason.rfind("not available on Linux", 0), 0u) << m.reason;
  EXPECT_TRUE(m.no_hardware);
  ProbeReport d = no_device(Api::DirectML, "not built into this binary", false);
  explain_with_hardware(d, GpuHardware{});
  EXPECT_EQ(d.reason.rfind("not available on Linux", 0), 0u) << d.reason;
#endif
}

TEST(Hardware, PolicyListsAbsentApisApartAndNamesThemWhenAsked) {
  GpuHardware hw;
  hw.known = true;
  std::vector<ProbeReport> reports;
  reports.push_back(no_device(Api::Cuda, "no NVIDIA driver: install the NVIDIA driver"));
  explain_with_hardware(reports.back(), hw);
  ProbeReport cpu;
  cpu.api = Api::Cpu;
  cpu.built = true;
  DeviceInfo c;
  c.id = "cpu";
  c.api = Api::Cpu;
  cpu.devices.push_back(c);
  reports.push_back(cpu);
  PolicyOptions opts;
  const CheckFn never = [](const DeviceInfo&) -> DeviceCheck {
    ADD_FAILURE() << "no GPU to check";
    return {};
  };
  const DeviceChoice auto_choice = choose_device(reports, opts, never);
  EXPECT_EQ(auto_choice.device_id, "cpu");
  EXPECT_TRUE(auto_choice.passed.empty());
  ASSERT_EQ(auto_choice.absent.size(), 1u);
  EXPECT_EQ(auto_choice.absent[0], "cuda: no NVIDIA GPU on this machine");
  opts.spec = parse_device_spec("cuda");
  try {
    choose_device(reports, opts, never);
    ADD_FAILURE() << "--device cuda chose a device";
  } catch (const BackendError& e) {
    EXPECT_STREQ(e.what(), "no CUDA device: no NVIDIA GPU on this machine");
  }
}

}  // namespace
}  // namespace ps
