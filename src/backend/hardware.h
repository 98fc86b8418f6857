#pragma once
// What hardware this machine has, read from the PCI bus, so that a probe's reason becomes advice
// only when the hardware it is about is there: with no NVIDIA GPU, CUDA finding no driver is
// "no NVIDIA GPU on this machine", not "install the NVIDIA driver".
#include "backend/backend.h"

namespace ps {

struct GpuHardware {
  bool known = false;  // false: the bus could not be read (nothing is concluded)
  bool nvidia = false, amd = false, any_gpu = false;
};

// The display, 3D and processing-accelerator devices under POLYSTACK_SYSROOT (default "/")'s
// /sys/bus/pci/devices. Unknown where the bus is not visible, and where GPUs are reached
// without it: WSL (its /dev/dxg, or "microsoft" in the kernel release) and NVIDIA's Tegra
// boards, whose GPU is not on PCI.
GpuHardware scan_gpu_hardware();

// A report of no devices, said in terms of the hardware: its reason replaced, and no_hardware
// set, when what its API needs is not on this machine (the probe's own words kept in detail).
// Metal and DirectML without a backend are "not available on Linux". Reports with devices, and
// probes that failed (a crash or hang is a fault whatever the hardware), are left as they are.
void explain_with_hardware(ProbeReport& r, const GpuHardware& hw);

}  // namespace ps
