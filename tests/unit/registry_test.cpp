#include "backend/registry.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"

namespace ps {
namespace {

// A backend whose probe returns fixed devices, for the selection policy.
class StaticBackend final : public Backend {
 public:
  StaticBackend(Api api, std::vector<DeviceInfo> devices, std::string reason = {})
      : api_(api), devices_(std::move(devices)), reason_(std::move(reason)) {}
  Api api() const override { return api_; }
  ProbeReport probe() override {
    ProbeReport r;
    r.api = api_;
    r.built = true;
    r.devices = devices_;
    r.reason = reason_;
    return r;
  }
  std::unique_ptr<Device> open_device(int, const DeviceOptions&) override {
    throw BackendError("static backend");
  }

 private:
  Api api_;
  std::vector<DeviceInfo> devices_;
  std::string reason_;
};

TEST(Registry, EveryApiHasAReport) {
  Registry r;
  r.add(make_cpu_backend());
  r.set_hardware(GpuHardware{});  // the bus unread: every report as its probe gave it
  const auto& reports = r.probe_all();
  ASSERT_EQ(reports.size(), std::size(kAllApis));
  for (const auto& rep : reports) {
    if (rep.api == Api::Cpu) {
      EXPECT_TRUE(rep.built);
      ASSERT_EQ(rep.devices.size(), 1u);
      EXPECT_EQ(rep.devices[0].id, "cpu");
    } else {
      EXPECT_FALSE(rep.built);
#if defined(__linux__)
      // Metal and DirectML do not exist on Linux: said so, and not a device passed over.
      if (rep.api == Api::Metal || rep.api == Api::DirectML) {
        EXPECT_EQ(rep.reason.rfind("not available on Linux", 0), 0u) << rep.reason;
        EXPECT_TRUE(rep.no_hardware);
        continue;
      }
#endif
      EXPECT_NE(rep.reason.find("not built into this binary"), std::string::npos) << rep.reason;
    }
  }
}

TEST(Registry, OpenExplainsMissingDevices) {
  Registry r;
  r.set_hardware(GpuHardware{});
  r.add(make_cpu_backend());
  r.add(std::make_unique<StaticBackend>(Api::Vulkan, std::vector<DeviceInfo>{},
                                        "libvulkan.so.1 not found"));
  auto expect_error = [&](const std::string& id, const std::string& part) {
    try {
      r.open(id, {});
      ADD_FAILURE() << id << " opened";
    } catch (const BackendError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error("vulkan:0", "libvulkan.so.1 not found");
  expect_error("cuda:0", "not built into this binary");
  expect_error("cpu:1", "does not exist: cpu has 1 device(s)");
  expect_error("nosuch", "unknown device 'nosuch'");
  expect_error("cpu:x", "not a device index");
  EXPECT_NE(r.open("cpu", {}), nullptr);
  EXPECT_NE(r.open("cpu:0", {}), nullptr);
}

TEST(Registry, LoadsPluginsAndReportsBrokenOnes) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("polystack-plugins-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(POLYSTACK_TEST_PLUGIN, dir / "libpolystack-backend-opencl.so",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "libpolystack-backend-vulkan.so") << "not an ELF file";
  Registry r;
  r.add(make_cpu_backend());
  load_backend_plugins(r, dir.string());
  std::filesystem::remove_all(dir);
  const auto& reports = r.probe_all();
  for (const auto& rep : reports) {
    if (rep.api == Api::OpenCL) {
      EXPECT_TRUE(rep.built);
      ASSERT_EQ(rep.devices.size(), 1u);
      EXPECT_EQ(rep.devices[0].name, "Fake GPU");
    }
    if (rep.api == Api::Vulkan) {
      EXPECT_FALSE(rep.built);
      EXPECT_NE(rep.reason.find("could not be loaded"), std::string::npos) << rep.reason;
    }
  }
}

TEST(Registry, RefusesAPluginBuiltForAnotherAbi) {
  try {
    load_backend_plugin(POLYSTACK_TEST_PLUGIN_OTHER_ABI);
    FAIL() << "a plugin of another backend ABI was loaded";
  } catch (const BackendError& e) {
    const std::string want = fmt::format(
        "was built for another version of polystack (backend ABI {}, this one has {}); rebuild "
        "it or remove it",
        kBackendAbiVersion - 1, kBackendAbiVersion);
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  EXPECT_NE(load_backend_plugin(POLYSTACK_TEST_PLUGIN), nullptr);
}

TEST(Registry, NamesTheLibraryAPluginLacks) {
  EXPECT_EQ(plugin_load_failure("libpolystack-backend-hip.so",
                                "libamdhip64.so.5: cannot open shared object file: No such file "
                                "or directory"),
            "plugin libpolystack-backend-hip.so needs libamdhip64.so.5, which is not installed "
            "(the ROCm HIP runtime; Debian and Ubuntu: libamdhip64-5, or AMD's ROCm)");
  EXPECT_EQ(plugin_load_failure("libpolystack-backend-x.so",
                                "libfoo.so.2: cannot open shared object file: No such file"),
            "plugin libpolystack-backend-x.so needs libfoo.so.2, which is not installed");
  EXPECT_EQ(plugin_load_failure("libpolystack-backend-x.so", "invalid ELF header"),
            "plugin libpolystack-backend-x.so could not be loaded: invalid ELF header");
}

}  // namespace
}  // namespace ps
