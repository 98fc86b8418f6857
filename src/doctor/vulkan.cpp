// doctor's Vulkan chain: the loader, the ICD manifests and the drivers they name, and the
// render nodes Mesa's GPU drivers open.
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

namespace {

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

}  // namespace

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

}  // namespace ps::doctor::detail
