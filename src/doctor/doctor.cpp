#include "doctor/doctor.h"

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

namespace ps::doctor {
namespace {

const char* const kLibDirs[] = {"/usr/lib/x86_64-linux-gnu",
                                "/lib/x86_64-linux-gnu",
                                "/usr/lib64",
                                "/lib64",
                                "/usr/lib",
                                "/lib",
                                "/usr/local/lib",
                                "/usr/lib/wsl/lib"};

unsigned hex_value(const std::optional<std::string>& s) {
  if (!s) return 0;
  char* end = nullptr;
  const unsigned long v = std::strtoul(s->c_str(), &end, 16);
  return end == s->c_str() ? 0 : unsigned(v);
}

std::string base_name(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

std::string group_name(const Sysroot& root, unsigned gid) {
  if (auto g = root.read("/etc/group")) {
    std::istringstream in(*g);
    std::string line;
    while (std::getline(in, line)) {
      // name:x:gid:members
      const size_t a = line.find(':'), b = line.find(':', a + 1), c = line.find(':', b + 1);
      if (a == std::string::npos || b == std::string::npos || c == std::string::npos) continue;
      if (line.substr(b + 1, c - b - 1) == std::to_string(gid)) return line.substr(0, a);
    }
  }
  return std::to_string(gid);
}

// A library found by name in the library folders: its path, and what its symlinks end at.
struct Library {
  std::string path, resolved;
  bool found() const { return !path.empty(); }
};

Library find_library(const Sysroot& root, const std::string& name,
                     const std::vector<std::string>& extra_dirs = {}) {
  std::vector<std::string> dirs(extra_dirs);
  dirs.insert(dirs.end(), std::begin(kLibDirs), std::end(kLibDirs));
  for (const std::string& d : dirs) {
    const std::string p = d + "/" + name;
    if (root.exists(p)) return {p, root.resolve(p)};
  }
  return {};
}

// The version in a library's file name: "libcuda.so.580.65.06" -> "580.65.06".
std::string so_version(const std::string& path, const std::string& stem) {
  const std::string b = base_name(path);
  const std::string prefix = stem + ".so.";
  return b.starts_with(prefix) ? b.substr(prefix.size()) : "";
}

bool is_wsl(const Sysroot& root) {
  if (root.exists("/dev/dxg")) return true;
  auto rel = root.read_line("/proc/sys/kernel/osrelease");
  if (!rel) return false;
  std::string l = *rel;
  std::transform(l.begin(), l.end(), l.begin(), ::tolower);
  return l.find("microsoft") != std::string::npos;
}

bool in_container(const Sysroot& root) {
  return root.exists("/.dockerenv") || root.exists("/run/.containerenv");
}

std::string container_fix(bool nvidia) {
  return nvidia ? "start the container with the GPU: docker run --gpus all ... (with the NVIDIA "
                  "Container Toolkit installed on the host)"
                : "start the container with the GPU's device nodes: docker run --device /dev/kfd "
                  "--device /dev/dri ...";
}

// A kernel module file for `name` under /lib/modules/<release>.
std::string module_on_disk(const Sysroot& root, const std::string& name) {
  const auto rel = root.read_line("/proc/sys/kernel/osrelease");
  if (!rel) return "";
  std::function<std::string(const std::string&, int)> walk = [&](const std::string& dir,
                                                                 int depth) -> std::string {
    if (depth > 8) return "";
    for (const std::string& e : root.list(dir)) {
      const std::string p = dir + "/" + e;
      if (e.starts_with(name + ".ko")) return p;
      if (root.is_dir(p) && !root.link_target(p)) {
        std::string found = walk(p, depth + 1);
        if (!found.empty()) return found;
      }
    }
    return "";
  };
  for (const char* base : {"/lib/modules/", "/usr/lib/modules/"}) {
    std::string found = walk(base + *rel, 0);
    if (!found.empty()) return found;
  }
  return "";
}

bool secure_boot_on(const Sysroot& root) {
  for (const std::string& e : root.list("/sys/firmware/efi/efivars"))
    if (e.starts_with("SecureBoot-")) {
      auto v = root.read("/sys/firmware/efi/efivars/" + e);
      return v && v->size() >= 5 && (*v)[4] == 1;
    }
  return false;
}

// A *_VISIBLE_DEVICES style variable against the count of GPUs it selects from.
std::optional<Check> visible_devices_check(const std::string& api, const char* var, size_t gpus) {
  auto v = env(var);
  if (!v) return std::nullopt;
  Check c{api + ".environment", api, "environment", Status::Ok, "", {}, ""};
  c.evidence.push_back(fmt::format("{} = '{}'", var, *v));
  if (v->empty()) {
    c.status = Status::Fail;
    c.summary = fmt::format("{} is set but empty, which hides every GPU", var);
    c.fix = fmt::format("unset {}", var);
    return c;
  }
  std::vector<std::string> bad;
  std::istringstream in(*v);
  std::string item;
  size_t valid = 0;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long idx = std::strtol(item.c_str(), &end, 10);
    const bool number = end != item.c_str() && *end == '\0';
    if (number && idx < 0) break;  // the CUDA runtime stops at the first invalid entry
    if (number && size_t(idx) >= gpus)
      bad.push_back(fmt::format("{} (there are {} GPU(s), numbered from 0)", item, gpus));
    else if (number || item.starts_with("GPU-") || item.starts_with("MIG-"))
      ++valid;
    else
      bad.push_back(item);
  }
  if (valid == 0) {
    c.status = Status::Fail;
    c.summary = fmt::format("{} selects no GPU that exists", var);
    if (!bad.empty()) c.evidence.push_back("not a GPU here: " + bad.front());
    c.fix = fmt::format("unset {} (or list GPUs that exist, e.g. {}=0)", var, var);
  } else if (!bad.empty()) {
    c.status = Status::Warn;
    c.summary = fmt::format("{} names GPUs that do not exist", var);
    c.evidence.push_back("not a GPU here: " + bad.front());
  } else {
    c.status = Status::Info;
    c.summary = fmt::format("{} selects GPUs {}", var, *v);
  }
  return c;
}

struct Chain {
  std::vector<Check>& out;
  std::string api;
  bool failed = false;
  std::string because;
  // Adds c unless an earlier layer failed, in which case a Skip in its place.
  void add(Check c) {
    if (failed) {
      out.push_back({c.id, api, c.layer, Status::Skip, "because " + because, {}, ""});
      return;
    }
    if (c.status == Status::Fail) {
      failed = true;
      because = c.summary;
    }
    out.push_back(std::move(c));
  }
  Check make(const std::string& id, const std::string& layer) const {
    return Check{api + "." + id, api, layer, Status::Ok, "", {}, ""};
  }
};

std::string pci_evidence(const PciGpu& g) {
  return fmt::format("/sys/bus/pci/devices/{}: vendor 0x{:04x}, device 0x{:04x}{}, class 0x{:06x}",
                     g.address, g.vendor, g.device, g.model.empty() ? "" : " (" + g.model + ")",
                     g.pci_class);
}

std::string gpu_name(const PciGpu& g) {
  return fmt::format("{} {} at {}", g.vendor_name,
                     g.model.empty() ? fmt::format("device 0x{:04x}", g.device) : g.model,
                     g.address);
}

// The DRM render nodes (/dev/dri/renderD*); the first one's name when there are none, so that
// its absence is reported.
std::vector<std::string> render_nodes(const Sysroot& root) {
  std::vector<std::string> nodes;
  for (const std::string& e : root.list("/dev/dri"))
    if (e.starts_with("renderD")) nodes.push_back("/dev/dri/" + e);
  if (nodes.empty()) nodes.push_back("/dev/dri/renderD128");
  return nodes;
}

// Device nodes: present and openable.
void node_check(const Sysroot& root, const Options& o, Chain& ch,
                const std::vector<std::string>& nodes, bool nvidia) {
  Check c = ch.make("device-nodes", "device nodes");
  std::vector<std::string> missing, denied;
  for (const std::string& n : nodes) {
    auto m = root.mode(n);
    if (!m) {
      missing.push_back(n);
      continue;
    }
    const bool ok = can_open_rw(*m, o.who.uid, o.who.gids);
    c.evidence.push_back(fmt::format("{}: mode {:04o}, owner {}, group {}{}", n, m->mode, m->uid,
                                     group_name(root, m->gid), ok ? "" : " (not openable by you)"));
    if (!ok) denied.push_back(n);
  }
  if (!missing.empty()) {
    c.status = Status::Fail;
    c.summary = fmt::format("{} is missing", missing.front());
    if (in_container(root))
      c.fix = container_fix(nvidia);
    else if (missing.front() == "/dev/nvidia-uvm")
      c.fix =
          "sudo modprobe nvidia-uvm (or run nvidia-modprobe -u -c 0), which creates "
          "/dev/nvidia-uvm";
    else if (nvidia)
      c.fix =
          "sudo modprobe nvidia (the nodes appear with the module; nvidia-modprobe creates "
          "them too)";
    else if (missing.front() == "/dev/kfd")
      c.fix = "sudo modprobe amdgpu; /dev/kfd needs the amdgpu driver with KFD (compute) support";
    else
      c.fix = "load the GPU's kernel driver (see the kernel driver check)";
  } else if (!denied.empty()) {
    c.status = Status::Fail;
    const auto m = root.mode(denied.front());
    const std::string group = group_name(root, m ? m->gid : 0);
    c.summary = fmt::format("{} cannot be opened by this user (uid {})", denied.front(), o.who.uid);
    c.fix = fmt::format("sudo usermod -aG {} $USER, then log in again", group);
  } else {
    c.summary = fmt::format("{} present and openable", fmt::join(nodes, ", "));
  }
  ch.add(std::move(c));
}

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

// An ICD manifest's library, and whether it exists.
struct Icd {
  std::string manifest, library, error;
  bool present = false;
};

Icd read_icd(const Sysroot& root, const std::string& manifest) {
  Icd icd{manifest, "", "", false};
  auto text = root.read(manifest);
  if (!text) {
    icd.error = "cannot be read";
    return icd;
  }
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("ICD") || !j["ICD"].is_object() ||
      !j["ICD"].contains("library_path") || !j["ICD"]["library_path"].is_string()) {
    icd.error = "is not a Vulkan ICD manifest (no ICD.library_path)";
    return icd;
  }
  icd.library = j["ICD"]["library_path"].get<std::string>();
  if (icd.library.find('/') != std::string::npos) {
    const std::string dir = manifest.substr(0, manifest.rfind('/'));
    const std::string p = icd.library.starts_with("/") ? icd.library : dir + "/" + icd.library;
    icd.present = root.exists(p);
  } else {
    icd.present = find_library(root, icd.library).found();
  }
  return icd;
}

void vulkan_chain(const Sysroot& root, const Options& o, const std::vector<PciGpu>& gpus,
                  std::vector<Check>& out) {
  (void)o;
  Chain ch{out, "vulkan", false, {}};
  Check lib = ch.make("loader", "user-space runtime");
  const Library loader = find_library(root, "libvulkan.so.1");
  if (!loader.found()) {
    lib.status = gpus.empty() ? Status::Warn : Status::Fail;
    lib.summary = "the Vulkan loader (libvulkan.so.1) is not installed";
    lib.fix = "Debian/Ubuntu: sudo apt install libvulkan1";
    ch.add(lib);
  } else {
    lib.summary = "the Vulkan loader is installed";
    lib.evidence.push_back(fmt::format("{} -> {}", loader.path, loader.resolved));
    ch.add(lib);
  }
  // The drivers (ICDs): the environment's list, else the standard folders.
  Check drv = ch.make("drivers", "drivers (ICDs)");
  std::vector<std::string> manifests;
  std::string from;
  for (const char* var : {"VK_DRIVER_FILES", "VK_ICD_FILENAMES"})
    if (auto v = env(var); v && manifests.empty()) {
      from = var;
      std::istringstream in(*v);
      std::string item;
      while (std::getline(in, item, ':'))
        if (!item.empty()) manifests.push_back(item);
      drv.evidence.push_back(fmt::format("{} = '{}'", var, *v));
    }
  if (from.empty())
    for (const char* dir :
         {"/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d"})
      for (const std::string& e : root.list(dir))
        if (e.ends_with(".json")) manifests.push_back(std::string(dir) + "/" + e);
  std::vector<Icd> icds;
  for (const std::string& m : manifests) icds.push_back(read_icd(root, m));
  // Which GPUs each driver is for, by its library's name (Mesa's and the vendors').
  const auto driver_vendor = [](const std::string& lib) -> unsigned {
    const std::string b = base_name(lib);
    if (b.find("lvp") != std::string::npos) return 1;  // lavapipe: the CPU
    if (b.find("radeon") != std::string::npos || b.find("amdvlk") != std::string::npos)
      return 0x1002;
    if (b.find("intel") != std::string::npos) return 0x8086;
    if (b.find("nvidia") != std::string::npos || b.find("nouveau") != std::string::npos)
      return 0x10de;
    return 0;
  };
  std::vector<std::string> names, broken;
  std::vector<unsigned> vendors;
  for (const Icd& i : icds) {
    drv.evidence.push_back(i.error.empty() ? fmt::format("{}: library {}{}", i.manifest, i.library,
                                                         i.present ? "" : " (missing)")
                                           : fmt::format("{}: {}", i.manifest, i.error));
    if (!i.error.empty() || !i.present) {
      broken.push_back(i.manifest);
      continue;
    }
    const unsigned v = driver_vendor(i.library);
    vendors.push_back(v);
    names.push_back(v == 1 ? "lavapipe (a CPU driver)" : base_name(i.library));
  }
  std::vector<const PciGpu*> without;
  for (const PciGpu& g : gpus)
    if (std::find(vendors.begin(), vendors.end(), g.vendor) == vendors.end() &&
        std::find(vendors.begin(), vendors.end(), 0u) == vendors.end())
      without.push_back(&g);
  const std::string listed = names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
  if (!from.empty() && !broken.empty()) {
    drv.status = Status::Fail;
    drv.summary = fmt::format("{} names a driver that cannot be used: {}", from, broken.front());
    drv.fix = fmt::format("unset {} (or point it at an existing ICD manifest)", from);
  } else if (!without.empty()) {
    const PciGpu& g = *without.front();
    drv.status = Status::Fail;
    drv.summary = fmt::format("no Vulkan driver for the {} GPU {} (installed: {})", g.vendor_name,
                              g.address, listed);
    drv.fix = g.vendor == 0x10de
                  ? "install NVIDIA's driver, which brings its Vulkan driver"
                  : "Debian/Ubuntu: sudo apt install mesa-vulkan-drivers (RADV for AMD, ANV for "
                    "Intel)";
  } else if (gpus.empty()) {
    drv.status = Status::Info;
    drv.summary = fmt::format("drivers installed: {}; no GPU for them to drive", listed);
  } else {
    drv.summary = fmt::format("drivers installed: {}", listed);
    if (!broken.empty()) {
      drv.status = Status::Warn;
      drv.summary += fmt::format("; a manifest names a missing library: {}", broken.front());
    }
  }
  ch.add(drv);
  // Render nodes for Mesa's GPU drivers.
  bool needs_render = false;
  for (const PciGpu& g : gpus) needs_render |= g.vendor != 0x10de;
  if (needs_render) node_check(root, o, ch, render_nodes(root), false);
}

void opencl_chain(const Sysroot& root, std::vector<Check>& out) {
  Chain ch{out, "opencl", false, {}};
  Check c = ch.make("drivers", "drivers (ICDs)");
  const Library loader = find_library(root, "libOpenCL.so.1");
  std::vector<std::string> icds;
  for (const std::string& e : root.list("/etc/OpenCL/vendors"))
    if (e.ends_with(".icd")) icds.push_back(e);
  if (loader.found()) c.evidence.push_back(fmt::format("{} -> {}", loader.path, loader.resolved));
  for (const std::string& e : icds) {
    const auto lib = root.read_line("/etc/OpenCL/vendors/" + e);
    c.evidence.push_back(fmt::format("/etc/OpenCL/vendors/{}: {}", e, lib ? *lib : "(unreadable)"));
  }
  c.status = Status::Info;
  if (!loader.found())
    c.summary = "no OpenCL ICD loader (libOpenCL.so.1)";
  else if (icds.empty()) {
    c.status = Status::Warn;
    c.summary =
        "the OpenCL loader is installed but no vendor driver (/etc/OpenCL/vendors is "
        "empty)";
    c.fix = "install a vendor's OpenCL driver (PoCL for CPUs: sudo apt install pocl-opencl-icd)";
  } else {
    c.summary = fmt::format("{} OpenCL driver(s)", icds.size());
  }
  c.summary += "; polystack has no OpenCL backend yet";
  ch.add(c);
}

// Sandboxes that hide GPUs, and polystack's own settings.
void system_checks(const Sysroot& root, std::vector<Check>& out) {
  Check c{"system.sandbox", "system", "environment", Status::Info, "", {}, ""};
  if (root.exists("/.flatpak-info")) {
    c.status = Status::Warn;
    c.summary = "running in a Flatpak sandbox, which sees GPUs only when allowed";
    c.evidence.push_back("/.flatpak-info present");
    c.fix = "flatpak override --user --device=all APP (or --device=dri for Mesa drivers)";
  } else if (env("SNAP")) {
    c.summary = "running as a Snap; GPU access needs its opengl/hardware interfaces connected";
    c.evidence.push_back(fmt::format("SNAP = '{}'", *env("SNAP")));
    c.fix = "snap connect APP:opengl (and APP:hardware-observe)";
  } else if (in_container(root)) {
    c.summary = "running in a container: the GPU must be passed in";
    c.evidence.push_back(root.exists("/.dockerenv") ? "/.dockerenv present"
                                                    : "/run/.containerenv present");
  } else {
    c.summary = "not in a container or sandbox";
  }
  out.push_back(c);
  Check p{"system.polystack-settings", "system", "environment", Status::Info, "", {}, ""};
  for (char** e = ::environ; *e; ++e) {
    const std::string kv = *e;
    if (!kv.starts_with("POLYSTACK_")) continue;
    const size_t eq = kv.find('=');
    const std::string value = kv.substr(eq + 1);
    p.evidence.push_back(value.empty() ? kv.substr(0, eq) + " is set but empty"
                                       : fmt::format("{} = '{}'", kv.substr(0, eq), value));
  }
  p.summary = p.evidence.empty() ? "no POLYSTACK_ variable is set"
                                 : fmt::format("{} POLYSTACK_ variable(s) set", p.evidence.size());
  out.push_back(p);
}

}  // namespace

const char* status_name(Status s) {
  switch (s) {
    case Status::Ok:
      return "ok";
    case Status::Warn:
      return "warn";
    case Status::Fail:
      return "fail";
    case Status::Skip:
      return "skip";
    case Status::Info:
      return "info";
  }
  return "?";
}

std::string pci_ids_model(const std::string& ids, unsigned vendor, unsigned device) {
  // "10de  NVIDIA Corporation" then its devices as "\t2335  GH100 [H200 SXM 141GB]".
  const std::string v = fmt::format("\n{:04x}  ", vendor);
  size_t at = ids.compare(0, v.size() - 1, v, 1) == 0 ? 0 : ids.find(v);
  if (at == std::string::npos) return "";
  if (at > 0) at += 1;
  const std::string d = fmt::format("\t{:04x}  ", device);
  for (size_t line = ids.find('\n', at); line != std::string::npos && line + 1 < ids.size();
       line = ids.find('\n', line + 1)) {
    const char first = ids[line + 1];
    if (first != '\t' && first != '#') return "";  // the next vendor
    if (ids.compare(line + 1, d.size(), d) == 0) {
      const size_t start = line + 1 + d.size();
      return ids.substr(start, ids.find('\n', start) - start);
    }
  }
  return "";
}

std::vector<PciGpu> find_gpus(const Sysroot& root) {
  std::optional<std::string> ids;
  bool ids_read = false;
  std::vector<PciGpu> out;
  for (const std::string& a : root.list("/sys/bus/pci/devices")) {
    const std::string dir = "/sys/bus/pci/devices/" + a;
    const unsigned cls = hex_value(root.read_line(dir + "/class"));
    const unsigned base = cls >> 16;
    if (base != 0x03 && base != 0x12) continue;
    PciGpu g;
    g.address = a;
    g.pci_class = cls;
    g.vendor = hex_value(root.read_line(dir + "/vendor"));
    g.device = hex_value(root.read_line(dir + "/device"));
    g.vendor_name = pci_vendor_name(g.vendor);
    if (!ids_read) {
      ids_read = true;
      for (const char* f : {"/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids"})
        if (!ids) ids = root.read(f, size_t(8) << 20);
    }
    if (ids) g.model = pci_ids_model(*ids, g.vendor, g.device);
    if (auto t = root.link_target(dir + "/driver")) g.driver = base_name(*t);
    out.push_back(g);
  }
  return out;
}

Identity Identity::of_process() {
  Identity id;
  id.uid = unsigned(getuid());
  id.gids.push_back(unsigned(getgid()));
  gid_t groups[256];
  const int n = getgroups(256, groups);
  for (int i = 0; i < n; ++i) id.gids.push_back(unsigned(groups[i]));
  return id;
}

bool skip_after_failure(std::vector<Check>& checks, const std::string& api, const std::string& id,
                        const std::string& layer) {
  for (const Check& c : checks)
    if (c.api == api && c.status == Status::Fail) {
      checks.push_back({id, api, layer, Status::Skip, "because " + c.summary, {}, ""});
      return true;
    }
  return false;
}

std::string gfx_from_target_version(const std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || n < 10000 || n > 999999) return "";
  const long major = n / 10000, minor = (n / 100) % 100, step = n % 100;
  if (minor > 15 || step > 15) return "";
  return fmt::format("gfx{}{:x}{:x}", major, minor, step);
}

std::string gfx_from_override(const std::string& v) {
  int a = 0, b = 0, c = 0;
  char tail = 0;
  if (std::sscanf(v.c_str(), "%d.%d.%d%c", &a, &b, &c, &tail) != 3 || a < 1 || a > 99 || b < 0 ||
      b > 15 || c < 0 || c > 15)
    return "";
  return fmt::format("gfx{}{:x}{:x}", a, b, c);
}

std::string nvidia_module_version(const std::string& text) {
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..."
  const size_t at = text.find("Kernel Module");
  if (at == std::string::npos) return "";
  // The open module's line reads "... Open Kernel Module for x86_64  575.57.08 ...": the first
  // word of digits and dots on the line.
  std::istringstream in(text.substr(at + 13, text.find('\n', at) - at - 13));
  std::string v;
  while (in >> v)
    if (std::isdigit(static_cast<unsigned char>(v[0])) &&
        v.find_first_not_of("0123456789.") == std::string::npos && v.find('.') != std::string::npos)
      return v;
  return "";
}

std::vector<Check> file_checks(const Sysroot& root, const Options& opts) {
  const auto wanted = [&](const char* api) {
    return opts.apis.empty() ||
           std::find(opts.apis.begin(), opts.apis.end(), std::string(api)) != opts.apis.end();
  };
  const std::vector<PciGpu> gpus = find_gpus(root);
  std::vector<Check> out;
  system_checks(root, out);
  if (wanted("cuda")) nvidia_chain(root, opts, gpus, out);
  if (wanted("hip")) amd_chain(root, opts, gpus, out);
  if (wanted("vulkan")) vulkan_chain(root, opts, gpus, out);
  if (wanted("opencl")) opencl_chain(root, out);
  return out;
}

}  // namespace ps::doctor
