#pragma once
// Probe reports as JSON: how a probe child reports to its parent, and `devices --json`.
#include <nlohmann/json.hpp>

#include "backend/backend.h"

namespace ps {

nlohmann::json to_json(const DeviceInfo& d);
nlohmann::json to_json(const ProbeReport& r);
// BackendError when j is not a report as to_json writes it.
ProbeReport probe_report_from_json(const nlohmann::json& j);

}  // namespace ps
