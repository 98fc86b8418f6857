#pragma once
// PCI vendor ids by name ("NVIDIA" for 0x10de): the Vulkan probe reports them, doctor reads
// them off the PCI bus.
#include <cstdint>
#include <string>

namespace ps {

// The vendor's name, or "vendor 0x1234" for one not listed.
std::string pci_vendor_name(uint32_t id);

}  // namespace ps
