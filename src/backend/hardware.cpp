#include "backend/hardware.h"

#include <fmt/format.h>

#include <cstdlib>

#include "doctor/sysroot.h"

namespace ps {
namespace {

unsigned hex_of(const std::optional<std::string>& s) {
  if (!s) return 0;
  return unsigned(std::strtoul(s->c_str(), nullptr, 16));
}

}  // namespace

GpuHardware scan_gpu_hardware() {
  GpuHardware hw;
  try {
    const doctor::Sysroot root = doctor::Sysroot::from_env();
    // WSL reaches the host's GPUs through /dev/dxg, with nothing on the guest's PCI bus; Tegra
    // boards (Jetson) have an NVIDIA GPU that is not on PCI. On both, the probe's words stand.
    const std::string release = root.read_line("/proc/sys/kernel/osrelease").value_or("");
    if (root.exists("/dev/dxg") || release.find("microsoft") != std::string::npos ||
        release.find("WSL") != std::string::npos || root.exists("/etc/nv_tegra_release") ||
        root.exists("/dev/nvhost-ctrl-gpu") || !root.is_dir("/sys/bus/pci/devices"))
      return hw;
    hw.known = true;
    for (const std::string& a : root.list("/sys/bus/pci/devices")) {
      const std::string dir = "/sys/bus/pci/devices/" + a;
      const unsigned base = hex_of(root.read_line(dir + "/class")) >> 16;
      if (base != 0x03 && base != 0x12) continue;
      hw.any_gpu = true;
      const unsigned vendor = hex_of(root.read_line(dir + "/vendor"));
      hw.nvidia |= vendor == 0x10de;
      hw.amd |= vendor == 0x1002;
    }
  } catch (const std::exception&) {
    return GpuHardware{};  // a POLYSTACK_SYSROOT that is not a folder: doctor says so
  }
  return hw;
}

void explain_with_hardware(ProbeReport& r, const GpuHardware& hw) {
  // A probe that crashed or hung is reported as such whatever the hardware: that is a fault.
  if (!r.devices.empty() || r.failed) return;
  auto absent = [&r](std::string why) {
    if (r.detail.empty()) r.detail = r.reason;
    r.reason = std::move(why);
    r.no_hardware = true;
  };
#if defined(__linux__)
  constexpr const char* kSystem = "Linux";
#else
  constexpr const char* kSystem = "this system";
#endif
#if !defined(__APPLE__)
  if (r.api == Api::Metal && !r.built) {
    r.reason = fmt::format("not available on {} (Metal exists only on Apple platforms)", kSystem);
    r.no_hardware = true;
    return;
  }
#endif
#if !defined(_WIN32)
  if (r.api == Api::DirectML && !r.built) {
    r.reason = fmt::format("not available on {} (DirectML exists only on Windows)", kSystem);
    r.no_hardware = true;
    return;
  }
#endif
  if (!hw.known) return;
  if (r.api == Api::Cuda && !hw.nvidia) absent("no NVIDIA GPU on this machine");
  if (r.api == Api::Hip && !hw.amd) absent("no AMD GPU on this machine");
  if ((r.api == Api::Vulkan || r.api == Api::OpenCL) && !hw.any_gpu && r.built)
    absent(fmt::format("no GPU on this machine ({})", r.reason));
}

}  // namespace ps
