#include "backend/probe_json.h"

#include <fmt/format.h>

#include "core/error.h"

namespace ps {

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
                      {"uuid", d.uuid},
                      {"pci_bus_id", d.pci_bus_id}};
  // Facts keep their order: a list of [name, value] pairs.
  nlohmann::json facts = nlohmann::json::array();
  for (const auto& [k, v] : d.facts) facts.push_back({k, v});
  j["facts"] = facts;
  j["usable"] = d.unusable.empty();
  if (!d.unusable.empty()) j["unusable_reason"] = d.unusable;
  return j;
}

nlohmann::json to_json(const ProbeReport& r) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceInfo& d : r.devices) devices.push_back(to_json(d));
  return {{"api", api_name(r.api)},
          {"built", r.built},
          {"failed", r.failed},
          {"reason", r.reason},
          {"devices", devices}};
}

namespace {

Api api_from_name(const std::string& name) {
  for (Api a : kAllApis)
    if (api_name(a) == name) return a;
  throw BackendError(fmt::format("probe report: unknown API '{}'", name));
}

DeviceKind kind_from_name(const std::string& name) {
  for (DeviceKind k : {DeviceKind::Cpu, DeviceKind::DiscreteGpu, DeviceKind::IntegratedGpu,
                       DeviceKind::VirtualGpu, DeviceKind::Accelerator})
    if (device_kind_name(k) == name) return k;
  throw BackendError(fmt::format("probe report: unknown device kind '{}'", name));
}

}  // namespace

ProbeReport probe_report_from_json(const nlohmann::json& j) {
  try {
    ProbeReport r;
    r.api = api_from_name(j.at("api").get<std::string>());
    r.built = j.at("built").get<bool>();
    r.failed = j.value("failed", false);
    r.reason = j.at("reason").get<std::string>();
    for (const auto& dj : j.at("devices")) {
      DeviceInfo d;
      d.id = dj.at("id").get<std::string>();
      d.api = api_from_name(dj.at("api").get<std::string>());
      d.kind = kind_from_name(dj.at("kind").get<std::string>());
      d.name = dj.at("name").get<std::string>();
      d.vendor = dj.at("vendor").get<std::string>();
      d.memory_total = dj.at("memory_total").get<uint64_t>();
      d.memory_free = dj.at("memory_free").get<uint64_t>();
      d.unified_memory = dj.at("unified_memory").get<bool>();
      d.driver_version = dj.at("driver_version").get<std::string>();
      d.runtime_version = dj.at("runtime_version").get<std::string>();
      d.architecture = dj.at("architecture").get<std::string>();
      d.uuid = dj.at("uuid").get<std::string>();
      d.pci_bus_id = dj.at("pci_bus_id").get<std::string>();
      for (const auto& f : dj.at("facts"))
        d.facts.emplace_back(f.at(0).get<std::string>(), f.at(1).get<std::string>());
      d.unusable = dj.value("unusable_reason", std::string());
      if (d.api != r.api) throw BackendError("probe report: a device of another API");
      r.devices.push_back(std::move(d));
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw BackendError(fmt::format("probe report: {}", e.what()));
  }
}

}  // namespace ps
