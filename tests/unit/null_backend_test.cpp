// backends/null, the skeleton a new backend is copied from: it builds as a plugin, registers,
// probes "no devices: this is the skeleton", and its one device (POLYSTACK_NULL_DEVICES=1)
// passes the structure the conformance suite asks of every device: the ordering contract, a
// reason for each case it does not run, and the CPU's results for the one op it does.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "backends/builtin.h"
#include "conformance_cases.h"
#include "core/error.h"

namespace ps {
namespace {

class NullBackend : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("POLYSTACK_NULL_DEVICES"); }
};

TEST_F(NullBackend, RegistersAndProbesNoDevices) {
  Registry reg;
  reg.add(load_backend_plugin(POLYSTACK_NULL_PLUGIN));
  const ProbeReport& r = reg.probe(Api::Null);
  EXPECT_EQ(r.api, Api::Null);
  EXPECT_TRUE(r.built);
  EXPECT_FALSE(r.failed);
  EXPECT_TRUE(r.devices.empty());
  EXPECT_EQ(r.reason, "no devices: this is the skeleton");
  // Not an API the registry looks for: `devices` never lists it.
  for (Api a : kAllApis) EXPECT_NE(a, Api::Null);
  EXPECT_EQ(api_name(Api::Null), "null");
}

TEST_F(NullBackend, OpeningAnAbsentDeviceSaysWhy) {
  std::unique_ptr<Backend> b = load_backend_plugin(POLYSTACK_NULL_PLUGIN);
  try {
    b->open_device(0, DeviceOptions{});
    FAIL() << "the skeleton opened a device it does not have";
  } catch (const BackendError& e) {
    EXPECT_STREQ(e.what(), "null:0: no such device (0 found; no devices: this is the skeleton)");
  }
}

TEST_F(NullBackend, ItsDevicePassesTheConformanceStructure) {
  setenv("POLYSTACK_NULL_DEVICES", "1", 1);
  std::unique_ptr<Backend> b = load_backend_plugin(POLYSTACK_NULL_PLUGIN);
  const ProbeReport r = b->probe();
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].id, "null:0");
  std::unique_ptr<Device> dev = b->open_device(0, DeviceOptions{});
  EXPECT_THROW(b->open_device(1, DeviceOptions{}), BackendError);

  for (const std::string& p : conformance::ordering_problems(*dev)) ADD_FAILURE() << p;

  Registry reg;
  register_builtin_backends(reg);
  std::unique_ptr<Device> cpu = reg.open("cpu", DeviceOptions{});
  int compared = 0, unsupported = 0;
  for (auto& c : conformance::all_cases()) {
    std::string why;
    for (Tensor* n : c->graph.nodes())
      if (why.empty()) why = dev->unsupported_reason(*n);
    if (!why.empty()) {
      // One line that says why, for the conformance report.
      EXPECT_EQ(why.find('\n'), std::string::npos) << c->name;
      ++unsupported;
      // The contract gives execute() only supported nodes; the skeleton refuses the others.
      EXPECT_THROW(conformance::run_on(*dev, *c), BackendError) << c->name;
      continue;
    }
    SCOPED_TRACE(c->name);
    const std::vector<float> want = conformance::run_on(*cpu, *c);
    const std::vector<float> got = conformance::run_on(*dev, *c);
    for (const std::string& m : conformance::mismatches(*c, want, got)) ADD_FAILURE() << m;
    ++compared;
  }
  std::printf("null:0: %d cases match the CPU backend, %d not supported\n", compared, unsupported);
  EXPECT_GT(compared, 0);
  EXPECT_GT(unsupported, 0);
}

TEST_F(NullBackend, BuffersRefuseOutOfRangeAccess) {
  setenv("POLYSTACK_NULL_DEVICES", "1", 1);
  std::unique_ptr<Backend> b = load_backend_plugin(POLYSTACK_NULL_PLUGIN);
  std::unique_ptr<Device> dev = b->open_device(0, DeviceOptions{});
  std::unique_ptr<Buffer> buf = dev->alloc(64);
  const std::vector<uint8_t> bytes(16, 7);
  std::vector<uint8_t> back(16);
  buf->write(48, bytes.data(), 16);
  buf->read(48, back.data(), 16);
  EXPECT_EQ(back, bytes);
  try {
    buf->write(56, bytes.data(), 16);
    FAIL() << "a write past the end was taken";
  } catch (const BackendError& e) {
    EXPECT_STREQ(e.what(), "null:0: write of 16 bytes at 56 past a 64-byte buffer");
  }
  EXPECT_THROW(buf->read(size_t(-8), back.data(), 16), BackendError);
}

}  // namespace
}  // namespace ps
