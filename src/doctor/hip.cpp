// doctor's HIP chain: the AMD GPU, amdgpu and KFD, device nodes, the ROCm runtime and whether
// this build has kernels for the GPU's gfx target.
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

void amd_chain(const Sysroot& root, const Options& o, const std::vector<PciGpu>& all,
               std::vector<Check>& out) {
  Chain ch{out, "hip", false, {}};
  std::vector<PciGpu> gpus;
  for (const PciGpu& g : all)
    if (g.vendor == 0x1002) gpus.push_back(g);
  Check hw = ch.make("hardware", "hardware");
  if (gpus.empty()) {
    hw.status = Status::Info;
    hw.summary = "no AMD GPU on this machine";
    hw.evidence.push_back("/sys/bus/pci/devices: no device of vendor 0x1002 in class 0x03 or 0x12");
    out.push_back(hw);
    return;
  }
  hw.summary = fmt::format("{} AMD GPU(s): {}", gpus.size(), gpu_name(gpus.front()));
  for (const PciGpu& g : gpus) hw.evidence.push_back(pci_evidence(g));
  ch.add(hw);
  for (const PciGpu& g : gpus) {
    Check c = ch.make("kernel-driver", "kernel driver");
    c.evidence.push_back(fmt::format("/sys/bus/pci/devices/{}/driver -> {}", g.address,
                                     g.driver.empty() ? "(none)" : g.driver));
    if (g.driver == "amdgpu") {
      c.summary = fmt::format("{} is bound to amdgpu", g.address);
    } else if (g.driver == "radeon") {
      c.status = Status::Fail;
      c.summary = fmt::format("{} is held by radeon, the old driver, which has no compute (KFD)",
                              g.address);
      c.fix =
          "boot with radeon.si_support=0 amdgpu.si_support=1 (or the cik_ variants) to hand "
          "the card to amdgpu";
    } else {
      c.status = Status::Fail;
      c.summary = g.driver.empty()
                      ? fmt::format("no driver is bound to {}", g.address)
                      : fmt::format("{} is bound to {}, not amdgpu", g.address, g.driver);
      c.fix = "sudo modprobe amdgpu; if that fails, see: sudo dmesg | grep -i amdgpu";
    }
    ch.add(std::move(c));
  }
  std::vector<std::string> nodes = render_nodes(root);
  nodes.insert(nodes.begin(), "/dev/kfd");
  node_check(root, o, ch, nodes, false);

  Check lib = ch.make("runtime-library", "user-space runtime");
  Library hip = find_library(root, "libamdhip64.so.5");
  if (!hip.found()) hip = find_library(root, "libamdhip64.so", {"/opt/rocm/lib"});
  if (!hip.found()) {
    lib.status = Status::Fail;
    lib.summary = "the ROCm HIP runtime (libamdhip64) is not installed";
    lib.fix = "Debian/Ubuntu: sudo apt install libamdhip64-5 (or AMD's ROCm)";
  } else {
    lib.evidence.push_back(fmt::format("{} -> {}", hip.path, hip.resolved));
    lib.summary = "the ROCm HIP runtime is installed";
  }
  ch.add(lib);

  // The gfx target of each GPU node against the build's.
  Check c = ch.make("compatibility", "compatibility");
  const auto over = env("HSA_OVERRIDE_GFX_VERSION");
  const std::string forced = over ? gfx_from_override(*over) : "";
  if (over) c.evidence.push_back(fmt::format("HSA_OVERRIDE_GFX_VERSION = '{}'", *over));
  std::vector<std::string> targets;
  for (const std::string& n : root.list("/sys/class/kfd/kfd/topology/nodes")) {
    const std::string path = "/sys/class/kfd/kfd/topology/nodes/" + n + "/properties";
    auto props = root.read(path);
    if (!props) continue;
    std::istringstream in(*props);
    std::string key, value;
    while (in >> key >> value)
      if (key == "gfx_target_version" && value != "0") {
        const std::string gfx = gfx_from_target_version(value);
        c.evidence.push_back(fmt::format("{}: gfx_target_version {} ({})", path, value,
                                         gfx.empty() ? "not understood" : gfx));
        if (!gfx.empty()) targets.push_back(gfx);
      }
  }
  const auto built = [&](const std::string& t) {
    return std::find(o.hip_targets.begin(), o.hip_targets.end(), t) != o.hip_targets.end();
  };
  c.evidence.push_back(fmt::format("this build's HIP targets: {}", fmt::join(o.hip_targets, ", ")));
  if (targets.empty()) {
    c.status = Status::Warn;
    c.summary = "no GPU node in the KFD topology (is amdgpu's compute support loaded?)";
  } else if (!forced.empty()) {
    if (built(forced)) {
      c.status = Status::Warn;
      c.summary = fmt::format("the GPU ({}) runs as {} through HSA_OVERRIDE_GFX_VERSION",
                              targets.front(), forced);
    } else {
      c.status = Status::Fail;
      c.summary = fmt::format(
          "HSA_OVERRIDE_GFX_VERSION makes the GPU {}, which this build has no "
          "kernels for",
          forced);
      c.fix = "unset HSA_OVERRIDE_GFX_VERSION, or set it to a target of the build";
    }
  } else if (!built(targets.front())) {
    c.status = Status::Fail;
    c.summary = fmt::format("the GPU is {}, and this build has no kernels for it", targets.front());
    // A sibling of the same family in the build: the usual override.
    const std::string family = targets.front().substr(0, targets.front().size() - 1) + "0";
    if (family != targets.front() && built(family) && family.size() == 7)
      c.fix = fmt::format(
          "export HSA_OVERRIDE_GFX_VERSION={}.{}.0 (runs the {} kernels on the "
          "same family), or rebuild with -DPOLYSTACK_HIP_ARCHITECTURES={}; or use "
          "Vulkan (--device vulkan)",
          family.substr(3, 2), family.substr(5, 1), family, targets.front());
    else
      c.fix = fmt::format(
          "rebuild with -DPOLYSTACK_HIP_ARCHITECTURES={}, or use Vulkan "
          "(--device vulkan)",
          targets.front());
  } else {
    c.summary = fmt::format("the GPU is {}, which this build has kernels for", targets.front());
  }
  ch.add(c);
  for (const char* var : {"HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"})
    if (auto e = visible_devices_check("hip", var, gpus.size())) ch.add(*e);
}

}  // namespace ps::doctor::detail
