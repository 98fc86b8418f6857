// The CUDA probe asks the NVIDIA driver through its own API, opened with dlopen: a machine
// without the driver gets a report that says so instead of a plugin that fails to load. The
// runtime linked into the plugin (statically) opens the same library when a device is used.
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "backends/cuda/probe.h"
#include "backends/cuda/targets.h"
#include "backends/cuda/vendor.h"

#ifndef POLYSTACK_CUDA_ARCHITECTURES
#error "the build passes the CUDA architectures it compiles for"
#endif

namespace ps::gpu {
namespace {

// The driver API's types and the few enum values used, as the driver's ABI defines them.
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
constexpr CUresult kSuccess = 0;
constexpr CUresult kNoDevice = 100;
constexpr int kAttrMultiprocessors = 16, kAttrIntegrated = 18, kAttrCcMajor = 75, kAttrCcMinor = 76;

struct Driver {
  CUresult (*init)(unsigned);
  CUresult (*driver_version)(int*);
  CUresult (*device_count)(int*);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*device_name)(char*, int, CUdevice);
  CUresult (*device_attribute)(int*, int, CUdevice);
  CUresult (*device_total_mem)(size_t*, CUdevice);
  CUresult (*device_uuid)(unsigned char*, CUdevice);
  CUresult (*device_pci_bus_id)(char*, int, CUdevice);
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice);
  CUresult (*primary_ctx_release)(CUdevice);
  CUresult (*ctx_push)(CUcontext);
  CUresult (*ctx_pop)(CUcontext*);
  CUresult (*mem_info)(size_t*, size_t*);
  CUresult (*error_string)(CUresult, const char**);

  std::string error(CUresult r) const {
    const char* s = nullptr;
    if (error_string && error_string(r, &s) == kSuccess && s) return s;
    return fmt::format("CUDA driver error {}", r);
  }
};

// The driver's entry points, or null with the reason. The library stays open.
const Driver* open_driver(std::string* why) {
  static Driver driver;
  static std::string failure;
  static const bool ok = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      failure =
          "no NVIDIA driver: libcuda.so.1 not found (the CUDA toolkit does not provide it; "
          "install the NVIDIA driver)";
      return false;
    }
    bool all = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn) {
        if (failure.empty())
          failure = fmt::format("libcuda.so.1 lacks {} (too old a driver)", name);
        all = false;
      }
    };
    sym(driver.init, "cuInit");
    sym(driver.driver_version, "cuDriverGetVersion");
    sym(driver.device_count, "cuDeviceGetCount");
    sym(driver.device_get, "cuDeviceGet");
    sym(driver.device_name, "cuDeviceGetName");
    sym(driver.device_attribute, "cuDeviceGetAttribute");
    sym(driver.device_total_mem, "cuDeviceTotalMem_v2");
    // Optional: the UUID entry point was renamed (_v2) in CUDA 11.4; either will do.
    driver.device_uuid =
        reinterpret_cast<decltype(driver.device_uuid)>(dlsym(lib, "cuDeviceGetUuid_v2"));
    if (!driver.device_uuid)
      driver.device_uuid =
          reinterpret_cast<decltype(driver.device_uuid)>(dlsym(lib, "cuDeviceGetUuid"));
    sym(driver.device_pci_bus_id, "cuDeviceGetPCIBusId");
    sym(driver.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    sym(driver.primary_ctx_release, "cuDevicePrimaryCtxRelease_v2");
    sym(driver.ctx_push, "cuCtxPushCurrent_v2");
    sym(driver.ctx_pop, "cuCtxPopCurrent_v2");
    sym(driver.mem_info, "cuMemGetInfo_v2");
    sym(driver.error_string, "cuGetErrorString");
    return all;
  }();
  if (!ok) *why = failure;
  return ok ? &driver : nullptr;
}

std::string kernel_module_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_nvidia_driver_version(ss.str());
}

}  // namespace

ProbeReport probe_devices() {
  ProbeReport r;
  r.api = Api::Cuda;
  r.built = true;
  std::string why;
  const Driver* drv = open_driver(&why);
  if (!drv) {
    r.reason = why;
    return r;
  }
  const std::string module = kernel_module_version();
  if (const CUresult e = drv->init(0); e != kSuccess) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (e == kNoDevice)
      r.reason =
          fmt::format("the NVIDIA driver{} sees no GPU{}", module.empty() ? "" : " " + module,
                      visible ? fmt::format(" (CUDA_VISIBLE_DEVICES is '{}')", visible) : "");
    else
      r.reason = fmt::format(
          "the NVIDIA driver{} failed to start: {} (is the nvidia kernel module "
          "loaded? see dmesg)",
          module.empty() ? "" : " " + module, drv->error(e));
    return r;
  }
  int driver_cuda = 0, runtime = 0, count = 0;
  (void)drv->driver_version(&driver_cuda);
  (void)cudaRuntimeGetVersion(&runtime);
  if (runtime == 0) runtime = CUDART_VERSION;
  if (const CUresult e = drv->device_count(&count); e != kSuccess) {
    r.reason = fmt::format("cuDeviceGetCount failed: {}", drv->error(e));
    return r;
  }
  const std::optional<CudaTargets> parsed = parse_cuda_architectures(POLYSTACK_CUDA_ARCHITECTURES);
  if (!parsed) {  // CMake refuses such a list; a build that got past it says so here
    r.reason = fmt::format("this build's CUDA architecture list \"{}\" cannot be read",
                           POLYSTACK_CUDA_ARCHITECTURES);
    return r;
  }
  const CudaTargets& built = *parsed;
  const std::string too_old = cuda_driver_too_old(driver_cuda, runtime, module);
  for (int i = 0; i < count; ++i) {
    CudaDeviceFacts f;
    f.index = i;
    CUdevice dev = 0;
    if (drv->device_get(&dev, i) != kSuccess) continue;
    char name[256] = {};
    if (drv->device_name(name, sizeof(name) - 1, dev) == kSuccess) f.name = name;
    (void)drv->device_attribute(&f.cc_major, kAttrCcMajor, dev);
    (void)drv->device_attribute(&f.cc_minor, kAttrCcMinor, dev);
    (void)drv->device_attribute(&f.multiprocessors, kAttrMultiprocessors, dev);
    int integrated = 0;
    (void)drv->device_attribute(&integrated, kAttrIntegrated, dev);
    f.integrated = integrated != 0;
    size_t total = 0;
    if (drv->device_total_mem(&total, dev) == kSuccess) f.memory_total = total;
    std::array<uint8_t, 16> uuid{};
    if (drv->device_uuid && drv->device_uuid(uuid.data(), dev) == kSuccess) f.uuid = uuid;
    char bus[32] = {};
    if (drv->device_pci_bus_id(bus, sizeof(bus) - 1, dev) == kSuccess) f.pci_bus_id = bus;
    // Free memory needs a context: the primary one, which the runtime uses too.
    CUcontext ctx = nullptr;
    if (too_old.empty() && drv->primary_ctx_retain(&ctx, dev) == kSuccess) {
      if (drv->ctx_push(ctx) == kSuccess) {
        size_t free = 0;
        if (drv->mem_info(&free, &total) == kSuccess) f.memory_free = free;
        CUcontext popped = nullptr;
        (void)drv->ctx_pop(&popped);
      }
      (void)drv->primary_ctx_release(dev);
    }
    DeviceInfo d = describe_cuda_device(f, built, module, driver_cuda, runtime);
    if (!too_old.empty()) d.unusable = too_old;
    r.devices.push_back(std::move(d));
  }
  if (r.devices.empty())
    r.reason =
        fmt::format("the NVIDIA driver{} reports no GPU", module.empty() ? "" : " " + module);
  return r;
}

}  // namespace ps::gpu
