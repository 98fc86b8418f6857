// doctor's CUDA chain: the NVIDIA GPU, its kernel module, device nodes, libcuda and the
// driver version this build's runtime needs, and CUDA's environment.
#include <fmt/format.h>
#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/pci_vendor.h"
#include "doctor/chain.h"

namespace ps::doctor::detail {

void nvidia_chain(const Sysroot& root, const Options& o, const std::vector<PciGpu>& all,
                  std::vector<Check>& out) {
  Chain ch{out, "cuda", false, {}};
  std::vector<PciGpu> gpus;
  for (const PciGpu& g : all)
    if (g.vendor == 0x10de) gpus.push_back(g);
  const bool wsl = is_wsl(root);
  Check hw = ch.make("hardware", "hardware");
  if (gpus.empty() && !wsl) {
    hw.status = Status::Info;
    hw.summary = "no NVIDIA GPU on this machine";
    hw.evidence.push_back("/sys/bus/pci/devices: no device of vendor 0x10de in class 0x03 or 0x12");
    out.push_back(hw);
    return;
  }
  if (gpus.empty()) {
    hw.summary = "WSL: GPUs are reached through /dev/dxg, not the PCI bus";
    hw.evidence.push_back("/dev/dxg present");
  } else {
    hw.summary = fmt::format("{} NVIDIA GPU(s): {}", gpus.size(), gpu_name(gpus.front()));
    for (const PciGpu& g : gpus) hw.evidence.push_back(pci_evidence(g));
  }
  ch.add(hw);

  // Kernel driver.
  std::string module_version;
  if (auto v = root.read_line("/sys/module/nvidia/version")) module_version = *v;
  if (auto p = root.read("/proc/driver/nvidia/version"); p && module_version.empty())
    module_version = nvidia_module_version(*p);
  if (!wsl) {
    for (const PciGpu& g : gpus) {
      Check c = ch.make("kernel-driver", "kernel driver");
      c.evidence.push_back(fmt::format("/sys/bus/pci/devices/{}/driver -> {}", g.address,
                                       g.driver.empty() ? "(none)" : g.driver));
      if (g.driver == "nvidia") {
        c.summary = fmt::format("{} is bound to the nvidia driver{}", g.address,
                                module_version.empty() ? "" : " " + module_version);
        if (!module_version.empty())
          c.evidence.push_back("/sys/module/nvidia/version = " + module_version);
        if (!root.exists("/sys/module/nvidia_uvm")) {
          c.status = Status::Warn;
          c.summary += "; nvidia_uvm is not loaded (CUDA needs it)";
          c.evidence.push_back("/sys/module/nvidia_uvm: absent");
          c.fix = "sudo modprobe nvidia-uvm";
        }
      } else if (g.driver == "nouveau" || g.driver == "nova_core") {
        c.status = Status::Fail;
        c.summary = fmt::format("{} is held by {}, the open-source driver, which CUDA cannot use",
                                g.address, g.driver);
        c.fix =
            "install NVIDIA's driver (Debian/Ubuntu: sudo apt install nvidia-driver, or "
            "ubuntu-drivers install), which blacklists nouveau, then reboot";
      } else if (g.driver == "vfio-pci") {
        c.status = Status::Fail;
        c.summary = fmt::format(
            "{} is bound to vfio-pci (reserved for passing to a virtual "
            "machine)",
            g.address);
        c.fix = fmt::format(
            "release it from vfio-pci (remove it from the vfio-pci.ids kernel parameter or "
            "/etc/modprobe.d), then reboot; or: echo {} | sudo tee "
            "/sys/bus/pci/devices/{}/driver/unbind",
            g.address, g.address);
      } else if (g.driver.empty()) {
        c.status = Status::Fail;
        const std::string ko = module_on_disk(root, "nvidia");
        if (!ko.empty()) {
          c.evidence.push_back(fmt::format("module on disk: {}", ko));
          const bool sb = secure_boot_on(root);
          if (sb) c.evidence.push_back("Secure Boot: enabled (EFI variable SecureBoot = 1)");
          c.summary = fmt::format(
              "no driver is bound to {}: the nvidia module is installed but "
              "not loaded{}",
              g.address, sb ? ", and Secure Boot is on" : "");
          c.fix = sb ? "enroll the module's signing key (sudo mokutil --import "
                       "/var/lib/dkms/mok.pub, then reboot and confirm), or turn Secure Boot "
                       "off; see: sudo dmesg | grep -i nvidia"
                     : "sudo modprobe nvidia; if that fails, see: sudo dmesg | grep -i nvidia";
        } else {
          c.summary =
              fmt::format("no driver is bound to {}, and no nvidia module is installed", g.address);
          c.fix =
              "install NVIDIA's driver (Debian/Ubuntu: sudo apt install nvidia-driver), then "
              "reboot";
        }
      } else {
        c.status = Status::Fail;
        c.summary = fmt::format("{} is bound to {}, not nvidia", g.address, g.driver);
        c.fix = "install NVIDIA's driver and bind the card to it";
      }
      ch.add(std::move(c));
    }
  }

  // Device nodes.
  if (wsl) {
    node_check(root, o, ch, {"/dev/dxg"}, true);
  } else {
    std::vector<std::string> nodes = {"/dev/nvidiactl"};
    for (size_t i = 0; i < std::max<size_t>(gpus.size(), 1); ++i)
      nodes.push_back(fmt::format("/dev/nvidia{}", i));
    nodes.push_back("/dev/nvidia-uvm");
    node_check(root, o, ch, nodes, true);
  }

  // The user-space driver library.
  Check lib = ch.make("runtime-library", "user-space runtime");
  const Library cuda = find_library(root, "libcuda.so.1");
  std::string lib_version;
  if (!cuda.found()) {
    lib.status = Status::Fail;
    lib.summary = "libcuda.so.1 (the NVIDIA driver's user-space library) is not installed";
    lib.evidence.push_back(fmt::format("searched: {}", fmt::join(kLibDirs, ", ")));
    lib.fix = in_container(root)
                  ? container_fix(true)
                  : "install the NVIDIA driver's libraries (Debian: sudo apt install "
                    "libcuda1; Ubuntu: libnvidia-compute-<version>)";
  } else {
    lib.evidence.push_back(fmt::format("{} -> {}", cuda.path, cuda.resolved));
    lib_version = so_version(cuda.resolved, "libcuda");
    if (cuda.resolved.find("/stubs/") != std::string::npos ||
        cuda.path.find("/stubs/") != std::string::npos) {
      lib.status = Status::Fail;
      lib.summary = "the libcuda.so.1 found is the CUDA toolkit's stub, which only links";
      lib.fix =
          "install the NVIDIA driver (which brings the real libcuda.so.1) and take the "
          "toolkit's stubs folder out of LD_LIBRARY_PATH and /etc/ld.so.conf.d";
    } else if (wsl && !cuda.path.starts_with("/usr/lib/wsl/lib")) {
      lib.status = Status::Fail;
      lib.summary = fmt::format(
          "WSL: {} shadows the Windows driver's /usr/lib/wsl/lib/libcuda.so.1", cuda.path);
      lib.fix = fmt::format(
          "remove the Linux driver's libcuda inside WSL (sudo rm {}) or put "
          "/usr/lib/wsl/lib first (sudo ldconfig); install the driver only on "
          "Windows",
          cuda.path);
    } else {
      lib.summary =
          fmt::format("libcuda.so.1 found{}", lib_version.empty() ? "" : " (" + lib_version + ")");
    }
  }
  ch.add(lib);

  // Compatibility: kernel module against library, and against this build's runtime.
  if (!wsl) {
    Check c = ch.make("compatibility", "compatibility");
    if (!module_version.empty())
      c.evidence.push_back(fmt::format("kernel module version {}", module_version));
    if (!lib_version.empty()) c.evidence.push_back(fmt::format("libcuda version {}", lib_version));
    const int major = std::atoi(module_version.c_str());
    if (!module_version.empty() && !lib_version.empty() && module_version != lib_version) {
      c.status = Status::Fail;
      c.summary = fmt::format(
          "driver/library version mismatch: the kernel module is {}, "
          "libcuda is {} (an upgrade without a reboot)",
          module_version, lib_version);
      c.fix = "reboot, so that the new kernel module is loaded";
    } else if (major > 0 && major < o.cuda_driver_needed) {
      c.status = Status::Fail;
      c.summary = fmt::format(
          "driver {} is older than this build's CUDA runtime needs ({} or "
          "newer)",
          module_version, o.cuda_driver_needed);
      c.fix = fmt::format("install NVIDIA driver {} or newer", o.cuda_driver_needed);
    } else if (major > 0) {
      c.summary = fmt::format("driver {} suits this build's CUDA runtime (needs {} or newer)",
                              module_version, o.cuda_driver_needed);
    } else {
      c.status = Status::Warn;
      c.summary = "the kernel module's version could not be read";
      c.evidence.push_back("/sys/module/nvidia/version and /proc/driver/nvidia/version: absent");
    }
    ch.add(c);
  }

  // Environment.
  for (const char* var : {"CUDA_VISIBLE_DEVICES"})
    if (auto c = visible_devices_check("cuda", var, std::max<size_t>(gpus.size(), 1))) ch.add(*c);
}

}  // namespace ps::doctor::detail
