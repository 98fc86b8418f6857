#pragma once
// One physical device seen through several APIs (an NVIDIA GPU through CUDA and Vulkan) is one
// entry: devices are matched across APIs by UUID, else by PCI address. And the forms a user may
// name a device in (`--device`, POLYSTACK_DEVICE).
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"

namespace ps {

// The UUID as 32 lowercase hex digits ("GPU-" and dashes dropped), or, for a UUID that is not
// hex (some drivers report text), its lowercase text; "" when absent or all zeros.
std::string normalized_uuid(std::string_view uuid);
// "0000:41:00.0" from "41:00.0" or "0000:41:00.0" in either case; "" when it is not a PCI
// address.
std::string normalized_pci_bus_id(std::string_view id);

// How two devices of different APIs are known to be the same hardware.
enum class SameHardware { No, ByUuid, ByPciBusId };
// Devices of one API are never the same hardware (an API lists each device once).
SameHardware same_hardware(const DeviceInfo& a, const DeviceInfo& b);

// CUDA, HIP and Metal (the vendor's own API) before Vulkan, then DirectML, OpenCL, the CPU.
int api_rank(Api api);

struct PhysicalDevice {
  // The device as seen through each API that reaches it, the vendor's own API first.
  std::vector<const DeviceInfo*> views;
  const DeviceInfo& primary() const { return *views.front(); }
};

// Groups the reports' devices into physical devices, in the order of their first view.
std::vector<PhysicalDevice> group_physical_devices(const std::vector<ProbeReport>& reports);

// What `--device` names.
struct DeviceSpec {
  enum class Kind {
    Auto,    // "" or "auto": the default policy
    Cpu,     // "cpu"
    Gpu,     // "gpu": the best GPU, or an error saying why there is none
    OneApi,  // "cuda", "vulkan", ...: that API's best device
    Id,      // "vulkan:0"
    Uuid,    // "GPU-8f3c...", or the bare UUID
    PciBus,  // "pci:0000:41:00.0"
  };
  Kind kind = Kind::Auto;
  Api api = Api::Cpu;  // OneApi, Id
  std::string value;   // Id: the id; Uuid: normalized_uuid; PciBus: normalized_pci_bus_id
  std::string text;    // as given
};
// UsageError naming the accepted forms when `text` is none of them.
DeviceSpec parse_device_spec(std::string_view text);
// The spec a command uses: its --device value, else POLYSTACK_DEVICE, else auto.
std::string device_spec_text(const std::string& flag);

// The device among `reports` that a spec of kind Id, Uuid or PciBus names (the view through the
// highest-ranked API for a UUID or PCI address); nullptr when none does.
const DeviceInfo* find_named_device(const std::vector<ProbeReport>& reports,
                                    const DeviceSpec& spec);

}  // namespace ps
