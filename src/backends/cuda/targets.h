#pragma once
// Host-side facts of the CUDA and HIP backends that need no GPU and no vendor library: which
// architectures this build holds code for and whether a device is covered, the version
// strings, and the probe report of a device from its facts. Unit-tested on every machine
// (tests/unit/gpu_targets_test.cpp); the probes fill the facts from the driver.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"

namespace ps::gpu {

// --- CUDA -------------------------------------------------------------------------------------

// One architecture a CUDA build holds code for: a compute capability x 10 and nvcc's suffix,
// none, 'a' (arch-specific: sm_90a, code that runs on that compute capability alone) or 'f'
// (family-specific, CUDA 12.9 on: sm_100f, code for that major version from that minor on).
struct CudaArch {
  int cc = 0;
  char variant = 0;
  auto operator<=>(const CudaArch&) const = default;
};
// The code a CUDA build holds: machine code (SASS) and PTX, each list sorted.
struct CudaTargets {
  std::vector<CudaArch> sass;
  std::vector<CudaArch> ptx;
};

// CMake's CUDA_ARCHITECTURES syntax: "90" (machine code and PTX), "90-real" (machine code),
// "90-virtual" (PTX), each number optionally with nvcc's 'a' or 'f' suffix ("90a-real"),
// separated by ';' or ','. nullopt for an entry that is none of these.
std::optional<CudaTargets> parse_cuda_architectures(std::string_view list);

// How a device of compute capability cc (x 10) runs this build's kernels.
struct CudaCoverage {
  enum class Kind { MachineCode, Ptx, None } kind = Kind::None;
  CudaArch arch;     // the architecture of the code used
  std::string text;  // for the probe report
};
// Machine code runs on devices of the same major version and an equal or higher minor one
// (arch-specific code on its own compute capability only); PTX is compiled by the driver for
// any device at or above its architecture (arch-specific PTX for its own compute capability,
// family-specific PTX within its major version). Of several, the newest architecture is used,
// and of one architecture the most specific code.
CudaCoverage cuda_coverage(int cc, const CudaTargets& built);

// "sm_75, sm_80 and sm_90a" style lists.
std::string format_archs(const std::vector<CudaArch>& archs, std::string_view prefix);

// 13000 -> "13.0", 12040 -> "12.4" (cudaRuntimeGetVersion / cuDriverGetVersion encoding).
std::string cuda_version_string(int version);
// The NVIDIA kernel module's version from /proc/driver/nvidia/version ("580.65.06"), or "".
std::string parse_nvidia_driver_version(std::string_view proc_text);
// The oldest Linux driver for a CUDA runtime major version ("580" for 13), or "" if unknown.
std::string min_driver_for_cuda(int runtime_version);
// Why the driver cannot run this runtime, or "" when it can. driver_cuda: cuDriverGetVersion;
// driver: the module's version string, possibly "".
std::string cuda_driver_too_old(int driver_cuda, int runtime, const std::string& driver);

// What the CUDA probe reads of one device.
struct CudaDeviceFacts {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  uint64_t memory_total = 0, memory_free = 0;
  bool integrated = false;
  std::optional<std::array<uint8_t, 16>> uuid;
  std::string pci_bus_id;
  int multiprocessors = 0;
};
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it.
std::string format_cuda_uuid(const std::array<uint8_t, 16>& u);
DeviceInfo describe_cuda_device(const CudaDeviceFacts& f, const CudaTargets& built,
                                const std::string& driver, int driver_cuda, int runtime);

// --- HIP --------------------------------------------------------------------------------------

// gfx targets separated by ';' or ',' ("gfx906;gfx90a;gfx1030").
std::vector<std::string> parse_hip_targets(std::string_view list);
// "gfx90a:sramecc+:xnack-" -> "gfx90a".
std::string hip_base_arch(std::string_view gcn_arch_name);
// "" when the build holds code for the device's gfx target, else why not and the fix. AMD code
// objects run only on the target they were built for.
std::string hip_uncovered(std::string_view gcn_arch_name, const std::vector<std::string>& built);

struct HipDeviceFacts {
  int index = 0;
  std::string name, gcn_arch_name;
  uint64_t memory_total = 0, memory_free = 0;
  bool integrated = false;
  int warp_size = 0, multiprocessors = 0;
  std::string pci_bus_id, uuid;
};
DeviceInfo describe_hip_device(const HipDeviceFacts& f, const std::vector<std::string>& built,
                               const std::string& runtime);

}  // namespace ps::gpu
