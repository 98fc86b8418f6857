#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "cli/commands.h"

namespace ps::cli {
namespace {

std::string gib(uint64_t b) {
  return fmt::format("{:.1f} GiB", double(b) / (1024.0 * 1024 * 1024));
}

nlohmann::json to_json(const DeviceInfo& d) {
  nlohmann::json j = {{"id", d.id},
                      {"api", api_name(d.api)},
                      {"kind", device_kind_name(d.kind)},
                      {"name", d.name},
                      {"vendor", d.vendor},
                      {"memory_total", d.memory_total},
                      {"memory_free", d.memory_free},
                      {"unified_memory", d.unified_memory},
                      {"driver_version", d.driver_version},
                      {"runtime_version", d.runtime_version},
                      {"architecture", d.architecture},
                      {"uuid", d.uuid}};
  nlohmann::json facts = nlohmann::json::object();
  for (const auto& [k, v] : d.facts) facts[k] = v;
  j["facts"] = facts;
  j["usable"] = d.unusable.empty();
  if (!d.unusable.empty()) j["unusable_reason"] = d.unusable;
  if (!d.not_default.empty()) j["not_default_reason"] = d.not_default;
  return j;
}

}  // namespace

Action add_devices(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List devices and why each API is or is not usable");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Machine-readable output");
  return [json] {
    Registry& reg = Registry::global();
    const auto& reports = reg.probe_all();
    const DeviceChoice choice = reg.choose_default();
    if (*json) {
      nlohmann::json out = {{"apis", nlohmann::json::array()},
                            {"devices", nlohmann::json::array()}};
      for (const auto& r : reports) {
        out["apis"].push_back({{"api", api_name(r.api)},
                               {"built", r.built},
                               {"available", !r.devices.empty()},
                               {"devices", r.devices.size()},
                               {"reason", r.reason}});
        for (const auto& d : r.devices) out["devices"].push_back(to_json(d));
      }
      out["default"] = {{"device", choice.device_id}, {"reason", choice.reason}};
      fmt::print("{}\n", out.dump(2));
      return 0;
    }
    for (const auto& r : reports) {
      for (const auto& d : r.devices) {
        fmt::print("{}: {} ({}, {})\n", d.id, d.name, device_kind_name(d.kind), d.vendor);
        if (d.memory_total)
          fmt::print("    memory: {} total, {}{}\n", gib(d.memory_total),
                     d.memory_free ? gib(d.memory_free) + " free" : std::string("free unknown"),
                     d.unified_memory ? " (shared with the host)" : "");
        if (!d.architecture.empty()) fmt::print("    architecture: {}\n", d.architecture);
        if (!d.driver_version.empty()) fmt::print("    driver: {}\n", d.driver_version);
        if (!d.runtime_version.empty()) fmt::print("    runtime: {}\n", d.runtime_version);
        if (!d.uuid.empty()) fmt::print("    uuid: {}\n", d.uuid);
        for (const auto& [k, v] : d.facts) fmt::print("    {}: {}\n", k, v);
        if (!d.unusable.empty()) fmt::print("    not usable: {}\n", d.unusable);
        if (!d.not_default.empty()) fmt::print("    not chosen by default: {}\n", d.not_default);
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
    fmt::print("\ndefault device: {} ({})\n", choice.device_id, choice.reason);
    return 0;
  };
}

}  // namespace ps::cli
