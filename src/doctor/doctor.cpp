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
#include "doctor/chain.h"

namespace ps::doctor {

using namespace detail;

namespace {

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
