// The HIP probe asks the ROCm runtime, which the HIP plugin links (a machine without it cannot
// load the plugin, and the registry reports the missing library). The GPU itself is reached
// through /dev/kfd, checked first so that a machine without the amdgpu driver gets that reason.
#include <fmt/format.h>
#include <unistd.h>

#include "backends/cuda/probe.h"
#include "backends/cuda/targets.h"
#include "backends/cuda/vendor.h"

#ifndef POLYSTACK_HIP_ARCHITECTURES
#error "the build passes the gfx targets it compiles for"
#endif

namespace ps::gpu {

ProbeReport probe_devices() {
  ProbeReport r;
  r.api = Api::Hip;
  r.built = true;
  if (access("/dev/kfd", F_OK) != 0) {
    r.reason = "no AMD GPU: /dev/kfd is missing (the amdgpu kernel driver is not loaded here)";
    return r;
  }
  if (access("/dev/kfd", R_OK | W_OK) != 0) {
    r.reason = "no permission to use /dev/kfd (add the user to the 'render' and 'video' groups)";
    return r;
  }
  int runtime = 0, count = 0;
  (void)hipRuntimeGetVersion(&runtime);
  const std::string version =
      fmt::format("HIP {}.{}.{}", runtime / 10000000, (runtime / 100000) % 100, runtime % 100000);
  if (const hipError_t e = hipGetDeviceCount(&count); e != hipSuccess) {
    r.reason =
        fmt::format("the ROCm runtime ({}) found no usable GPU: {}", version, hipGetErrorString(e));
    return r;
  }
  const std::vector<std::string> built = parse_hip_targets(POLYSTACK_HIP_ARCHITECTURES);
  for (int i = 0; i < count; ++i) {
    hipDeviceProp_t p{};
    if (hipGetDeviceProperties(&p, i) != hipSuccess) continue;
    HipDeviceFacts f;
    f.index = i;
    f.name = p.name;
    f.gcn_arch_name = p.gcnArchName;
    f.memory_total = p.totalGlobalMem;
    f.integrated = p.integrated != 0;
    f.warp_size = p.warpSize;
    f.multiprocessors = p.multiProcessorCount;
    f.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    size_t free = 0, total = 0;
    if (hipSetDevice(i) == hipSuccess && hipMemGetInfo(&free, &total) == hipSuccess)
      f.memory_free = free;
    r.devices.push_back(describe_hip_device(f, built, version));
  }
  if (r.devices.empty()) r.reason = fmt::format("the ROCm runtime ({}) reports no GPU", version);
  return r;
}

}  // namespace ps::gpu
