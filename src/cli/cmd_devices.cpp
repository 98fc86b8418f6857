#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "backend/device_choice.h"
#include "backend/physical_device.h"
#include "backend/probe_json.h"
#include "cli/commands.h"

namespace ps::cli {
namespace {

std::string gib(uint64_t b) {
  return fmt::format("{:.1f} GiB", double(b) / (1024.0 * 1024 * 1024));
}

const char* matched_by(const DeviceInfo& a, const DeviceInfo& b) {
  return same_hardware(a, b) == SameHardware::ByUuid ? "UUID" : "PCI address";
}

void print_facts(const DeviceInfo& d, const char* indent) {
  if (d.memory_total)
    fmt::print("{}memory: {} total, {}{}\n", indent, gib(d.memory_total),
               d.memory_free ? gib(d.memory_free) + " free" : std::string("free unknown"),
               d.unified_memory ? " (shared with the host)" : "");
  if (!d.architecture.empty()) fmt::print("{}architecture: {}\n", indent, d.architecture);
  if (!d.driver_version.empty()) fmt::print("{}driver: {}\n", indent, d.driver_version);
  if (!d.runtime_version.empty()) fmt::print("{}runtime: {}\n", indent, d.runtime_version);
  if (!d.uuid.empty()) fmt::print("{}uuid: {}\n", indent, d.uuid);
  if (!d.pci_bus_id.empty()) fmt::print("{}PCI bus id: {}\n", indent, d.pci_bus_id);
  for (const auto& [k, v] : d.facts) fmt::print("{}{}: {}\n", indent, k, v);
  if (!d.unusable.empty()) fmt::print("{}not usable: {}\n", indent, d.unusable);
}

}  // namespace

Action add_devices(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List devices and why each API is or is not usable");
  struct Opts {
    bool json = false, recheck = false, no_self_check = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_flag("--json", o->json, "Machine-readable output");
  cmd->add_flag("--recheck", o->recheck, "Run the GPUs' self-checks again");
  cmd->add_flag("--no-self-check", o->no_self_check,
                "Choose the default device without self-checking GPUs");
  return [o] {
    Registry& reg = Registry::global();
    const auto& reports = reg.probe_all();
    const std::vector<PhysicalDevice> physical = group_physical_devices(reports);
    ChoiceOptions co;
    co.spec = "auto";
    co.recheck = o->recheck;
    co.self_check = !o->no_self_check;
    const ChosenDevice choice = choose_device(reg, co);
    if (o->json) {
      nlohmann::json out = {{"apis", nlohmann::json::array()},
                            {"devices", nlohmann::json::array()},
                            {"physical_devices", nlohmann::json::array()}};
      for (const auto& r : reports) {
        out["apis"].push_back({{"api", api_name(r.api)},
                               {"built", r.built},
                               {"failed", r.failed},
                               {"available", !r.devices.empty()},
                               {"devices", r.devices.size()},
                               {"reason", r.reason},
                               {"no_hardware", r.no_hardware},
                               {"probe_detail", r.detail}});
      }
      for (const PhysicalDevice& p : physical) {
        nlohmann::json ids = nlohmann::json::array();
        for (const DeviceInfo* v : p.views) ids.push_back(v->id);
        nlohmann::json entry = {{"ids", ids}, {"name", p.primary().name}};
        if (p.views.size() > 1)
          entry["matched_by"] = same_hardware(*p.views[0], *p.views[1]) == SameHardware::ByUuid
                                    ? "uuid"
                                    : "pci_bus_id";
        out["physical_devices"].push_back(entry);
        for (const DeviceInfo* v : p.views) {
          nlohmann::json j = to_json(*v);
          nlohmann::json facts = nlohmann::json::object();
          for (const auto& [k, val] : v->facts) facts[k] = val;
          j["facts"] = facts;
          nlohmann::json also = nlohmann::json::array();
          for (const DeviceInfo* w : p.views)
            if (w != v) also.push_back(w->id);
          j["also"] = also;
          out["devices"].push_back(j);
        }
      }
      out["default"] = {{"device", choice.device_id},
                        {"reason", choice.reason},
                        {"passed_over", choice.passed},
                        {"not_present", choice.absent}};
      fmt::print("{}\n", out.dump(2));
      return 0;
    }
    for (const PhysicalDevice& p : physical) {
      const DeviceInfo& d = p.primary();
      std::string ids = d.id;
      for (size_t i = 1; i < p.views.size(); ++i)
        ids += (i == 1 ? ", also " : ", ") + p.views[i]->id;
      fmt::print("{}: {} ({}, {})\n", ids, d.name, device_kind_name(d.kind), d.vendor);
      print_facts(d, "    ");
      for (size_t i = 1; i < p.views.size(); ++i) {
        const DeviceInfo& v = *p.views[i];
        fmt::print("    as {} (the same device, matched by {}): {}\n", v.id, matched_by(d, v),
                   v.name);
        print_facts(v, "        ");
      }
    }
    fmt::print("\n");
    for (const auto& r : reports) {
      const auto usable = std::count_if(r.devices.begin(), r.devices.end(),
                                        [](const DeviceInfo& d) { return d.unusable.empty(); });
      if (usable > 0)
        fmt::print("{:<9} available: {} device(s)\n", api_name(r.api), usable);
      else if (!r.devices.empty())
        fmt::print("{:<9} not used: {} device(s) found, none usable (see above)\n", api_name(r.api),
                   r.devices.size());
      else
        fmt::print("{:<9} not used: {}\n", api_name(r.api), r.reason);
    }
    fmt::print("\n");
    for (const auto& line : choice.notes) fmt::print("{}\n", line);
    fmt::print("default device: {} ({})\n", choice.device_id, choice.reason);
    for (const auto& line : choice.passed) fmt::print("  not chosen: {}\n", line);
    for (const auto& line : choice.absent) fmt::print("  not present: {}\n", line);
    return 0;
  };
}

}  // namespace ps::cli
