// libFuzzer target for what `doctor` parses from a machine's files: the input becomes a Vulkan
// ICD manifest, a KFD topology properties file, /etc/group, the NVIDIA driver's version file
// and the module version of a fake machine (POLYSTACK_SYSROOT-style), and the checks run over
// it; the version and target parsers also get it directly. None may crash, hang or leak.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "doctor/doctor.h"

namespace {

namespace fs = std::filesystem;

void put(const fs::path& root, const std::string& path, const std::string& text) {
  const fs::path p = root / path;
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

const fs::path& machine() {
  static const fs::path root = [] {
    const fs::path r = fs::temp_directory_path() / ("fuzz-doctor-" + std::to_string(getpid()));
    const std::string gpu = "sys/bus/pci/devices/0000:41:00.0/";
    put(r, gpu + "vendor", "0x10de\n");
    put(r, gpu + "class", "0x030000\n");
    put(r, "sys/bus/pci/devices/0000:03:00.0/vendor", "0x1002\n");
    put(r, "sys/bus/pci/devices/0000:03:00.0/class", "0x030000\n");
    put(r, "dev/nvidiactl", "");
    return r;
  }();
  return root;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)ps::doctor::gfx_from_target_version(text);
  (void)ps::doctor::gfx_from_override(text);
  (void)ps::doctor::nvidia_module_version(text);
  const fs::path& root = machine();
  put(root, "usr/share/vulkan/icd.d/fuzz.json", text);
  put(root, "sys/class/kfd/kfd/topology/nodes/1/properties", text);
  put(root, "etc/group", text);
  put(root, "proc/driver/nvidia/version", text);
  put(root, "sys/module/nvidia/version", text);
  put(root, "etc/OpenCL/vendors/fuzz.icd", text);
  const ps::doctor::Sysroot sysroot(root.string());
  ps::doctor::Options opts;
  opts.hip_targets = {"gfx1030"};
  (void)ps::doctor::file_checks(sysroot, opts);
  return 0;
}
