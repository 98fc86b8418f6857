// libFuzzer target for what device choice parses: --device specs and PCI addresses from the
// user, and probe reports from a child process (which a broken plugin could garble). The first
// byte picks the parser; none may crash, hang or leak, whatever the rest holds.
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/physical_device.h"
#include "backend/probe_json.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0:
      try {
        const ps::DeviceSpec s = ps::parse_device_spec(text);
        (void)s;
      } catch (const ps::UsageError&) {
      }
      break;
    case 1:
      (void)ps::normalized_pci_bus_id(text);
      (void)ps::normalized_uuid(text);
      break;
    default: {
      const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
      try {
        std::vector<ps::ProbeReport> reports{ps::probe_report_from_json(j)};
        (void)ps::group_physical_devices(reports);
      } catch (const ps::BackendError&) {
      }
      break;
    }
  }
  return 0;
}
