#include "core/pci_vendor.h"

#include <fmt/format.h>

namespace ps {

std::string pci_vendor_name(uint32_t id) {
  switch (id) {
    case 0x1002:
      return "AMD";
    case 0x10de:
      return "NVIDIA";
    case 0x8086:
      return "Intel";
    case 0x13b5:
      return "Arm";
    case 0x5143:
      return "Qualcomm";
    case 0x106b:
      return "Apple";
    case 0x1010:
      return "Imagination";
    case 0x1af4:
      return "virtio";
    case 0x1234:
      return "QEMU";
    case 0x15ad:
      return "VMware";
    case 0x1414:
      return "Microsoft";
    default:
      return fmt::format("vendor 0x{:04x}", id);
  }
}

}  // namespace ps
