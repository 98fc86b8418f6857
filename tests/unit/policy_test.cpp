// Device identity across APIs, the forms of --device, and the selection policy over made-up
// probe reports and self-check outcomes.
#include "backend/policy.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"

namespace ps {
namespace {

DeviceInfo device(const std::string& id, Api api, DeviceKind kind, const std::string& uuid = {},
                  const std::string& pci = {}, uint64_t mem = 8ull << 30) {
  DeviceInfo d;
  d.id = id;
  d.api = api;
  d.kind = kind;
  d.name = id + " gpu";
  d.uuid = uuid;
  d.pci_bus_id = pci;
  d.memory_total = mem;
  return d;
}

std::vector<ProbeReport> reports(std::vector<DeviceInfo> devices) {
  std::vector<ProbeReport> out;
  for (Api api : kAllApis) {
    ProbeReport r;
    r.api = api;
    r.built = api == Api::Cpu || api == Api::Cuda || api == Api::Vulkan || api == Api::Hip;
    for (const DeviceInfo& d : devices)
      if (d.api == api) r.devices.push_back(d);
    if (api == Api::Cpu) r.devices.push_back(device("cpu", Api::Cpu, DeviceKind::Cpu));
    if (r.devices.empty()) r.reason = fmt::format("no {} device here", api_name(api));
    out.push_back(r);
  }
  return out;
}

// Self-check outcomes by device id; records which devices were checked.
struct Checks {
  std::map<std::string, DeviceCheck> by_id;
  std::vector<std::string> asked;
  void pass(const std::string& id, double speedup) {
    DeviceCheck c;
    c.checked = c.passed = true;
    c.speedup = speedup;
    by_id[id] = c;
  }
  void fail(const std::string& id, const std::string& why) {
    DeviceCheck c;
    c.checked = true;
    c.failure = why;
    by_id[id] = c;
  }
  CheckFn fn() {
    return [this](const DeviceInfo& d) {
      asked.push_back(d.id);
      auto it = by_id.find(d.id);
      if (it == by_id.end()) throw std::runtime_error("unexpected check of " + d.id);
      return it->second;
    };
  }
};

PolicyOptions spec(const std::string& text, bool strict = false) {
  PolicyOptions o;
  o.spec = parse_device_spec(text);
  o.strict = strict;
  return o;
}

bool has_line(const DeviceChoice& c, const std::string& start) {
  for (const auto& l : c.passed)
    if (l.rfind(start, 0) == 0) return true;
  return false;
}

TEST(PhysicalDevice, NormalizesUuidsAndPciAddresses) {
  EXPECT_EQ(normalized_uuid("GPU-8F3C0000-1111-2222-3333-444455556666"),
            "8f3c0000111122223333444455556666");
  EXPECT_EQ(normalized_uuid("8f3c0000-1111-2222-3333-444455556666"),
            "8f3c0000111122223333444455556666");
  EXPECT_EQ(normalized_uuid("00000000-0000-0000-0000-000000000000"), "");
  EXPECT_EQ(normalized_uuid(""), "");
  EXPECT_EQ(normalized_pci_bus_id("0000:4E:00.0"), "0000:4e:00.0");
  EXPECT_EQ(normalized_pci_bus_id("41:00.0"), "0000:41:00.0");
  EXPECT_EQ(normalized_pci_bus_id("0001:c1:1f.7"), "0001:c1:1f.7");
  EXPECT_EQ(normalized_pci_bus_id("41:00"), "");
  EXPECT_EQ(normalized_pci_bus_id("41:20.0"), "");  // device numbers stop at 0x1f
  EXPECT_EQ(normalized_pci_bus_id("zz:00.0"), "");
}

TEST(PhysicalDevice, MatchesByUuidElsePciNeverWithinOneApi) {
  const DeviceInfo cuda = device("cuda:0", Api::Cuda, DeviceKind::DiscreteGpu,
                                 "GPU-00112233-4455-6677-8899-aabbccddeeff", "0000:41:00.0");
  DeviceInfo vk = device("vulkan:1", Api::Vulkan, DeviceKind::DiscreteGpu,
                         "00112233-4455-6677-8899-aabbccddeeff");
  EXPECT_EQ(same_hardware(cuda, vk), SameHardware::ByUuid);
  // AMD: HIP and Vulkan give different UUIDs for one GPU; the PCI address matches.
  vk.uuid = "ffffffff-4455-6677-8899-aabbccddeeff";
  vk.pci_bus_id = "41:00.0";
  EXPECT_EQ(same_hardware(cuda, vk), SameHardware::ByPciBusId);
  // Neither matches.
  vk.pci_bus_id = "0000:42:00.0";
  EXPECT_EQ(same_hardware(cuda, vk), SameHardware::No);
  // No identity at all: never the same.
  EXPECT_EQ(same_hardware(device("cuda:0", Api::Cuda, DeviceKind::DiscreteGpu),
                          device("vulkan:0", Api::Vulkan, DeviceKind::DiscreteGpu)),
            SameHardware::No);
  // Two identical cards under one API are two devices, whatever they report.
  EXPECT_EQ(same_hardware(cuda, device("cuda:1", Api::Cuda, DeviceKind::DiscreteGpu, cuda.uuid)),
            SameHardware::No);
}

TEST(PhysicalDevice, GroupsViewsWithTheVendorsApiFirst) {
  const auto r = reports({device("vulkan:0", Api::Vulkan, DeviceKind::DiscreteGpu, "aa11"),
                          device("vulkan:1", Api::Vulkan, DeviceKind::IntegratedGpu, "bb22"),
                          device("cuda:0", Api::Cuda, DeviceKind::DiscreteGpu, "GPU-aa11")});
  const auto groups = group_physical_devices(r);
  ASSERT_EQ(groups.size(), 3u);  // cuda:0 = vulkan:0, vulkan:1, cpu
  EXPECT_EQ(groups[0].views.size(), 2u);
  EXPECT_EQ(groups[0].primary().id, "cuda:0");
  EXPECT_EQ(groups[0].views[1]->id, "vulkan:0");
  EXPECT_EQ(groups[1].primary().id, "vulkan:1");
  EXPECT_EQ(groups[2].primary().id, "cpu");
}

TEST(DeviceSpec, ParsesEveryForm) {
  using K = DeviceSpec::Kind;
  EXPECT_EQ(parse_device_spec("").kind, K::Auto);
  EXPECT_EQ(parse_device_spec("auto").kind, K::Auto);
  EXPECT_EQ(parse_device_spec("cpu").kind, K::Cpu);
  EXPECT_EQ(parse_device_spec("gpu").kind, K::Gpu);
  EXPECT_EQ(parse_device_spec("vulkan").kind, K::OneApi);
  EXPECT_EQ(parse_device_spec("cuda").api, Api::Cuda);
  const DeviceSpec id = parse_device_spec("vulkan:1");
  EXPECT_EQ(id.kind, K::Id);
  EXPECT_EQ(id.value, "vulkan:1");
  const DeviceSpec u = parse_device_spec("GPU-8f3c0000-1111-2222-3333-444455556666");
  EXPECT_EQ(u.kind, K::Uuid);
  EXPECT_EQ(u.value, "8f3c0000111122223333444455556666");
  EXPECT_EQ(parse_device_spec("8f3c0000111122223333444455556666").kind, K::Uuid);
  const DeviceSpec p = parse_device_spec("pci:41:00.0");
  EXPECT_EQ(p.kind, K::PciBus);
  EXPECT_EQ(p.value, "0000:41:00.0");
  for (const char* bad : {"nosuch", "vulkan:x", "vulkan:-1", "pci:zz", "GPU-12", "cuda:"})
    EXPECT_THROW(parse_device_spec(bad), UsageError) << bad;
}

TEST(Policy, DiscreteBeatsIntegratedAndLowerKindsAreNotChecked) {
  const auto r = reports({device("vulkan:0", Api::Vulkan, DeviceKind::IntegratedGpu, "i1"),
                          device("vulkan:1", Api::Vulkan, DeviceKind::DiscreteGpu, "d1")});
  Checks k;
  k.pass("vulkan:1", 5);
  k.pass("vulkan:0", 50);  // faster, but integrated
  const DeviceChoice c = choose_device(r, spec("auto"), k.fn());
  EXPECT_EQ(c.device_id, "vulkan:1");
  EXPECT_EQ(k.asked, std::vector<std::string>{"vulkan:1"});
  EXPECT_TRUE(has_line(c, "vulkan:0 (vulkan:0 gpu): a integrated gpu, ranked below"))
      << testing::PrintToString(c.passed);
  EXPECT_NE(c.reason.find("self-check passed, 5x the CPU"), std::string::npos) << c.reason;
}

TEST(Policy, AGpuSlowerThanTheCpuIsPassedOver) {
  const auto r = reports({device("vulkan:0", Api::Vulkan, DeviceKind::IntegratedGpu, "i1")});
  Checks k;
  k.pass("vulkan:0", 0.6);
  const DeviceChoice c = choose_device(r, spec("auto"), k.fn());
  EXPECT_EQ(c.device_id, "cpu");
  EXPECT_TRUE(has_line(c,
                       "vulkan:0 (vulkan:0 gpu): self-check passed, 0.6x the CPU on the timed "
                       "matmul, no faster than the CPU; passed over"))
      << testing::PrintToString(c.passed);
  // Asked for by name, or as `gpu`, it runs all the same.
  EXPECT_EQ(choose_device(r, spec("gpu"), k.fn()).device_id, "vulkan:0");
  EXPECT_EQ(choose_device(r, spec("vulkan:0"), k.fn()).device_id, "vulkan:0");
}

TEST(Policy, FailingSelfCheckPassesOverAndNamesTheCase) {
  const auto r = reports({device("cuda:0", Api::Cuda, DeviceKind::DiscreteGpu, "GPU-aa"),
                          device("vulkan:0", Api::Vulkan, DeviceKind::DiscreteGpu, "aa")});
  Checks k;
  k.fail("cuda:0", "computed matmul Q4_K decode 2.3e-01 away from the CPU");
  k.pass("vulkan:0", 12);
  // The same GPU through Vulkan is tried next.
  DeviceChoice c = choose_device(r, spec("auto"), k.fn());
  EXPECT_EQ(c.device_id, "vulkan:0");
  EXPECT_TRUE(has_line(c,
                       "cuda:0 (cuda:0 gpu): self-check failed: computed matmul Q4_K decode "
                       "2.3e-01 away from the CPU; passed over"))
      << testing::PrintToString(c.passed);
  // --strict makes that fallback an error.
  EXPECT_THROW(choose_device(r, spec("auto", true), k.fn()), BackendError);
  // Named, a failing device is an error.
  try {
    choose_device(r, spec("cuda:0"), k.fn());
    ADD_FAILURE() << "a failing named device was chosen";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0 (cuda:0 gpu) failed its self-check: computed "
                                         "matmul Q4_K"),
              std::string::npos)
        << e.what();
  }
  // ... unless the self-check is skipped.
  PolicyOptions o = spec("cuda:0");
  o.self_check = false;
  EXPECT_EQ(choose_device(r, o, k.fn()).device_id, "cuda:0");
}

TEST(Policy, DuplicatesUseTheVendorsApiAndAreListedOnce) {
  const auto r = reports({device("cuda:0", Api::Cuda, DeviceKind::DiscreteGpu, "GPU-aa"),
                          device("vulkan:0", Api::Vulkan, DeviceKind::DiscreteGpu, "aa")});
  Checks k;
  k.pass("cuda:0", 30);
  const DeviceChoice c = choose_device(r, spec("auto"), k.fn());
  EXPECT_EQ(c.device_id, "cuda:0");
  EXPECT_EQ(k.asked, std::vector<std::string>{"cuda:0"});  // vulkan:0 is the same GPU
  EXPECT_TRUE(has_line(c, "vulkan:0 (vulkan:0 gpu): the same device as cuda:0, used through cuda"))
      << testing::PrintToString(c.passed);
  // By UUID (either form) or PCI address, the vendor's API's view is chosen.
  EXPECT_THROW(choose_device(r, spec("aa000000000000000000000000000000"), k.fn()), BackendError)
      << "no device has that UUID";
}

TEST(Policy, NamesByUuidAndPciAddress) {
  const std::string uuid = "GPU-00112233-4455-6677-8899-aabbccddeeff";
  const auto r =
      reports({device("cuda:0", Api::Cuda, DeviceKind::DiscreteGpu, uuid, "0000:41:00.0"),
               device("vulkan:0", Api::Vulkan, DeviceKind::DiscreteGpu,
                      "00112233-4455-6677-8899-aabbccddeeff", "0000:41:00.0")});
  Checks k;
  k.pass("cuda:0", 30);
  EXPECT_EQ(choose_device(r, spec(uuid), k.fn()).device_id, "cuda:0");
  EXPECT_EQ(choose_device(r, spec("00112233445566778899aabbccddeeff"), k.fn()).device_id, "cuda:0");
  EXPECT_EQ(choose_device(r, spec("pci:0000:41:00.0"), k.fn()).device_id, "cuda:0");
  EXPECT_THROW(choose_device(r, spec("pci:0000:42:00.0"), k.fn()), BackendError);
}

TEST(Policy, MeasuredSpeedThenMemoryWithinAKind) {
  auto a = device("cuda:0", Api::Cuda, DeviceKind::DiscreteGpu, "GPU-a1", {}, 24ull << 30);
  auto b = device("cuda:1", Api::Cuda, DeviceKind::DiscreteGpu, "GPU-b1", {}, 80ull << 30);
  Checks k;
  k.pass("cuda:0", 40);
  k.pass("cuda:1", 20);
  EXPECT_EQ(choose_device(reports({a, b}), spec("auto"), k.fn()).device_id, "cuda:0");
  k.pass("cuda:1", 38);  // within 10 %: the larger memory decides
  EXPECT_EQ(choose_device(reports({a, b}), spec("auto"), k.fn()).device_id, "cuda:1");
}

TEST(Policy, CpuDriversOfGpuApisAreNeverTheDefault) {
  const auto r = reports({device("vulkan:0", Api::Vulkan, DeviceKind::Cpu, "c1")});
  Checks k;  // no check may run
  const DeviceChoice c = choose_device(r, spec("auto"), k.fn());
  EXPECT_EQ(c.device_id, "cpu");
  EXPECT_TRUE(has_line(c, "vulkan:0 (vulkan:0 gpu): a CPU driver of vulkan"))
      << testing::PrintToString(c.passed);
  EXPECT_TRUE(has_line(c, "cuda: no cuda device here"));
  // `gpu` finds none and says why, in one message.
  try {
    choose_device(r, spec("gpu"), k.fn());
    ADD_FAILURE() << "gpu chose a CPU driver";
  } catch (const BackendError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("no GPU passed (--device gpu): ", 0), 0u) << m;
    EXPECT_NE(m.find("vulkan:0 (vulkan:0 gpu): a CPU driver of vulkan"), std::string::npos) << m;
  }
  // Asked for by API, the CPU driver runs (after its check).
  k.pass("vulkan:0", 0.3);
  EXPECT_EQ(choose_device(r, spec("vulkan"), k.fn()).device_id, "vulkan:0");
}

TEST(Policy, UnusableAndAbsentNamedDevicesAreErrors) {
  auto bad = device("cuda:0", Api::Cuda, DeviceKind::DiscreteGpu, "GPU-aa");
  bad.unusable = "this card is sm_70";
  const auto r = reports({bad});
  Checks k;
  EXPECT_EQ(choose_device(r, spec("auto"), k.fn()).device_id, "cpu");
  EXPECT_THROW(choose_device(r, spec("cuda:0"), k.fn()), BackendError);
  try {
    choose_device(r, spec("hip:0"), k.fn());
    ADD_FAILURE();
  } catch (const BackendError& e) {
    EXPECT_STREQ(e.what(), "device 'hip:0' is not available: no hip device here");
  }
  EXPECT_THROW(choose_device(r, spec("cuda:3"), k.fn()), BackendError);
}

}  // namespace
}  // namespace ps
