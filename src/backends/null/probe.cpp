// The skeleton's probe. A real backend asks its API here: opens the runtime library (dlopen,
// so the plugin loads without it), lists platforms and devices with their facts, and says
// precisely why there are none (no library, no driver, a driver without devices), never "error".
#include <cstdlib>
#include <string_view>

#include "backends/null/device.h"

namespace ps::null {

ProbeReport probe() {
  ProbeReport r;
  r.api = Api::Null;
  r.built = true;
  const char* show = std::getenv("POLYSTACK_NULL_DEVICES");
  if (!show || std::string_view(show) != "1") {
    r.reason = "no devices: this is the skeleton";
    return r;
  }
  DeviceInfo d;
  d.id = "null:0";
  d.api = Api::Null;
  d.kind = DeviceKind::Accelerator;
  d.name = "skeleton device (host memory, one op)";
  d.vendor = "polystack";
  d.facts.push_back({"kernels", "scale (F32 rows)"});
  r.devices.push_back(std::move(d));
  return r;
}

}  // namespace ps::null
