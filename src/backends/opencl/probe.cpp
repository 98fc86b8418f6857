// What the OpenCL ICD loader and its drivers offer: every device with the facts that decide
// whether and how polystack can use it, or the precise reason there is none.
#include "backends/opencl/probe.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/pci_vendor.h"

namespace ps::ocl {
namespace {

// cl_khr_device_uuid and cl_khr_pci_bus_info, named here so older headers do too.
constexpr cl_device_info kDeviceUuid = 0x106A;  // CL_DEVICE_UUID_KHR
constexpr cl_device_info kPciBusInfo = 0x410F;  // CL_DEVICE_PCI_BUS_INFO_KHR
constexpr cl_int kPlatformNotFound = -1001;     // CL_PLATFORM_NOT_FOUND_KHR
struct PciBusInfo {
  cl_uint domain, bus, device, function;
};

// A string query (clGetPlatformInfo, clGetDeviceInfo): the size first, then the text without
// its terminating NUL; "" when the driver does not answer.
template <typename Handle, typename Info, typename Query>
std::string info_string(Query query, Handle h, Info what) {
  size_t n = 0;
  if (query(h, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
  std::string s(n, '\0');
  if (query(h, what, n, s.data(), nullptr) != CL_SUCCESS) return {};
  s.resize(std::strlen(s.c_str()));
  return s;
}

std::string platform_string(const Functions& f, cl_platform_id p, cl_platform_info what) {
  return info_string(f.clGetPlatformInfo, p, what);
}

std::string device_string(const Functions& f, cl_device_id d, cl_device_info what) {
  return info_string(f.clGetDeviceInfo, d, what);
}

template <typename T>
T device_value(const Functions& f, cl_device_id d, cl_device_info what, T fallback = T{}) {
  T v{};
  return f.clGetDeviceInfo(d, what, sizeof v, &v, nullptr) == CL_SUCCESS ? v : fallback;
}

bool has_extension(const std::string& list, const char* name) {
  const std::string n(name);
  for (size_t at = list.find(n); at != std::string::npos; at = list.find(n, at + 1)) {
    const bool starts = at == 0 || list[at - 1] == ' ';
    const bool ends = at + n.size() == list.size() || list[at + n.size()] == ' ';
    if (starts && ends) return true;
  }
  return false;
}

// "OpenCL 3.0 PoCL ..." -> 3, 0.
void parse_version(const std::string& v, int& major, int& minor) {
  major = minor = 0;
  if (std::sscanf(v.c_str(), "OpenCL %d.%d", &major, &minor) != 2) major = minor = 0;
}

const char* yes_no(bool b) { return b ? "yes" : "no"; }

// Where the loader was told to look for drivers, for the "no driver" message.
std::string driver_search_note() {
  for (const char* var : {"OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH"})
    if (const char* v = std::getenv(var); v && *v) return fmt::format(" ({} is set to {})", var, v);
  return " (/etc/OpenCL/vendors)";
}

}  // namespace

std::vector<DeviceExtras> enumerate(const Functions& f, std::string* why) {
  cl_uint n_platforms = 0;
  const cl_int e = f.clGetPlatformIDs(0, nullptr, &n_platforms);
  if (e == kPlatformNotFound || (e == CL_SUCCESS && n_platforms == 0)) {
    *why = fmt::format(
        "the OpenCL loader found no driver (ICD){}: install the OpenCL driver for your device "
        "(Intel: intel-opencl-icd; AMD: ROCm or Mesa's mesa-opencl-icd; NVIDIA: the driver's "
        "OpenCL part; CPUs: pocl-opencl-icd)",
        driver_search_note());
    return {};
  }
  if (e != CL_SUCCESS) {
    *why = fmt::format("clGetPlatformIDs failed: {} ({})", error_name(e), e);
    return {};
  }
  std::vector<cl_platform_id> platforms(n_platforms);
  f.clGetPlatformIDs(n_platforms, platforms.data(), nullptr);

  std::vector<DeviceExtras> out;
  std::vector<std::string> empty_platforms;
  for (cl_platform_id p : platforms) {
    const std::string platform = platform_string(f, p, CL_PLATFORM_NAME);
    cl_uint n = 0;
    if (f.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) {
      empty_platforms.push_back(platform.empty() ? "an unnamed platform" : platform);
      continue;
    }
    std::vector<cl_device_id> devices(n);
    f.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, devices.data(), nullptr);
    for (cl_device_id dev : devices) {
      DeviceExtras x;
      x.platform = p;
      x.device = dev;
      DeviceInfo& d = x.info;
      d.id = fmt::format("opencl:{}", out.size());
      d.api = Api::OpenCL;
      d.name = device_string(f, dev, CL_DEVICE_NAME);
      const auto type = device_value<cl_device_type>(f, dev, CL_DEVICE_TYPE);
      const bool unified = device_value<cl_bool>(f, dev, CL_DEVICE_HOST_UNIFIED_MEMORY);
      d.kind = (type & CL_DEVICE_TYPE_CPU) ? DeviceKind::Cpu
               : (type & CL_DEVICE_TYPE_GPU)
                   ? (unified ? DeviceKind::IntegratedGpu : DeviceKind::DiscreteGpu)
                   : DeviceKind::Accelerator;
      d.unified_memory = unified || d.kind == DeviceKind::Cpu;
      // A PCI vendor id for GPUs; CPU drivers report what they like (PoCL: Intel's).
      const auto vendor_id = device_value<cl_uint>(f, dev, CL_DEVICE_VENDOR_ID);
      const std::string vendor = device_string(f, dev, CL_DEVICE_VENDOR);
      d.vendor = d.kind == DeviceKind::Cpu || vendor_id == 0 ? vendor : pci_vendor_name(vendor_id);
      const std::string version = device_string(f, dev, CL_DEVICE_VERSION);
      parse_version(version, x.cl_major, x.cl_minor);
      d.runtime_version = fmt::format("OpenCL {}.{}", x.cl_major, x.cl_minor);
      d.driver_version = fmt::format("{} {}", platform, device_string(f, dev, CL_DRIVER_VERSION));
      d.memory_total = device_value<cl_ulong>(f, dev, CL_DEVICE_GLOBAL_MEM_SIZE);
      x.max_alloc = device_value<cl_ulong>(f, dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
      x.max_work_group = device_value<size_t>(f, dev, CL_DEVICE_MAX_WORK_GROUP_SIZE);
      const std::string exts = device_string(f, dev, CL_DEVICE_EXTENSIONS);
      x.fp16 = has_extension(exts, "cl_khr_fp16");
      x.subgroups =
          has_extension(exts, "cl_khr_subgroups") || has_extension(exts, "cl_intel_subgroups");
      x.integer_dot = has_extension(exts, "cl_khr_integer_dot_product");
      if (has_extension(exts, "cl_khr_device_uuid")) {
        unsigned char u[16] = {};
        if (f.clGetDeviceInfo(dev, kDeviceUuid, sizeof u, u, nullptr) == CL_SUCCESS) {
          for (int i = 0; i < 16; ++i) {
            if (i == 4 || i == 6 || i == 8 || i == 10) d.uuid += '-';
            d.uuid += fmt::format("{:02x}", u[i]);
          }
        }
      }
      if (has_extension(exts, "cl_khr_pci_bus_info")) {
        PciBusInfo pci{};
        if (f.clGetDeviceInfo(dev, kPciBusInfo, sizeof pci, &pci, nullptr) == CL_SUCCESS)
          d.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", pci.domain, pci.bus, pci.device,
                                     pci.function);
      }
      const bool compiler = device_value<cl_bool>(f, dev, CL_DEVICE_COMPILER_AVAILABLE);
      if (x.cl_major < 1 || (x.cl_major == 1 && x.cl_minor < 2))
        d.unusable = fmt::format("it offers {}; polystack needs OpenCL 1.2 or newer", version);
      else if (!compiler)
        d.unusable = "its driver has no OpenCL C compiler, which polystack's kernels need";

      d.facts.emplace_back("platform", platform);
      d.facts.emplace_back("device version", version);
      d.facts.emplace_back("OpenCL C", device_string(f, dev, CL_DEVICE_OPENCL_C_VERSION));
      d.facts.emplace_back("compute units", std::to_string(device_value<cl_uint>(
                                                f, dev, CL_DEVICE_MAX_COMPUTE_UNITS)));
      d.facts.emplace_back("largest buffer", fmt::format("{} MiB", x.max_alloc >> 20));
      d.facts.emplace_back("largest work-group", std::to_string(x.max_work_group));
      d.facts.emplace_back("subgroups", yes_no(x.subgroups));
      d.facts.emplace_back("fp16 arithmetic", yes_no(x.fp16));
      d.facts.emplace_back("integer dot product", yes_no(x.integer_dot));
      d.facts.emplace_back("UUID (cl_khr_device_uuid)", d.uuid.empty() ? "not reported" : d.uuid);
      d.facts.emplace_back("PCI bus (cl_khr_pci_bus_info)",
                           d.pci_bus_id.empty() ? "not reported" : d.pci_bus_id);
      out.push_back(std::move(x));
    }
  }
  if (out.empty())
    *why = fmt::format(
        "{} OpenCL platform(s) ({}) but no devices: the driver finds no hardware "
        "it runs on",
        platforms.size(), fmt::join(empty_platforms, ", "));
  return out;
}

ProbeReport probe() {
  ProbeReport r;
  r.api = Api::OpenCL;
  r.built = true;
  std::string why;
  const Functions* f = functions(&why);
  if (!f) {
    r.reason = why;
    return r;
  }
  for (DeviceExtras& x : enumerate(*f, &why)) r.devices.push_back(std::move(x.info));
  if (r.devices.empty()) r.reason = why;
  return r;
}

}  // namespace ps::ocl
