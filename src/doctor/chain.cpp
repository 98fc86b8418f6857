#include "doctor/chain.h"

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

namespace ps::doctor::detail {
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

Library find_library(const Sysroot& root, const std::string& name,
                     const std::vector<std::string>& extra_dirs) {
  std::vector<std::string> dirs(extra_dirs);
  dirs.insert(dirs.end(), std::begin(kLibDirs), std::end(kLibDirs));
  for (const std::string& d : dirs) {
    const std::string p = d + "/" + name;
    if (root.exists(p)) return {p, root.resolve(p)};
  }
  return {};
}

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

std::vector<std::string> render_nodes(const Sysroot& root) {
  std::vector<std::string> nodes;
  for (const std::string& e : root.list("/dev/dri"))
    if (e.starts_with("renderD")) nodes.push_back("/dev/dri/" + e);
  if (nodes.empty()) nodes.push_back("/dev/dri/renderD128");
  return nodes;
}

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

}  // namespace ps::doctor::detail
