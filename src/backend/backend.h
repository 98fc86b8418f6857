#pragma once
// The backend contract: an API's backend probes for devices (or says precisely why there are
// none), opens a device, allocates buffers on it, says which ops it supports and executes runs
// of graph nodes on its stream. The CPU backend is the first implementation and the reference.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/tensor.h"

namespace ps {

// Null is the skeleton a new backend is copied from (backends/null): not in kAllApis, so the
// registry neither looks for its plugin nor lists it; its tests load it by path.
enum class Api { Cpu, Cuda, Hip, Metal, Vulkan, OpenCL, DirectML, Null };
inline constexpr Api kAllApis[] = {Api::Cuda,   Api::Hip,      Api::Metal, Api::Vulkan,
                                   Api::OpenCL, Api::DirectML, Api::Cpu};
std::string_view api_name(Api api);          // "cpu", "cuda", ...
std::string_view api_display_name(Api api);  // "CPU", "CUDA", "Vulkan", ...

enum class DeviceKind { Cpu, DiscreteGpu, IntegratedGpu, VirtualGpu, Accelerator };
std::string_view device_kind_name(DeviceKind k);

struct DeviceInfo {
  std::string id;  // "cpu", "vulkan:0", "cuda:1"
  Api api = Api::Cpu;
  DeviceKind kind = DeviceKind::Cpu;
  std::string name, vendor;
  uint64_t memory_total = 0, memory_free = 0;  // bytes; 0 = unknown
  bool unified_memory = false;
  std::string driver_version, runtime_version, architecture;
  // Stable identity, so one GPU seen through two APIs is one physical device: the UUID as the
  // API prints it ("GPU-8f3c..." for CUDA) and the PCI address ("0000:41:00.0").
  std::string uuid, pci_bus_id;
  // Further facts in display order ("cores used", "ISA", ...).
  std::vector<std::pair<std::string, std::string>> facts;
  // Non-empty when the device was found but polystack cannot run models on it, saying why
  // (too old an API version, no kernels in this build, ...). The default policy passes over it.
  std::string unusable;
};

struct ProbeReport {
  Api api = Api::Cpu;
  bool built = false;  // this binary has (or loaded) a backend for the API
  std::vector<DeviceInfo> devices;
  std::string reason;  // why there are no devices (or why unusable)
  // The probe itself failed: the plugin or driver crashed, hung or exited while loading or
  // probing (reason says which). A failure, unlike an API that simply finds no device.
  bool failed = false;
  // What the API needs is not on this machine (backend/hardware.h): nothing to advise on, so a
  // command lists it only when asked for detail. detail keeps the probe's own reason.
  bool no_hardware = false;
  std::string detail;
};

// Memory owned by a device. CPU-visible buffers expose host_ptr().
//
// The ordering every backend keeps (tests/common/conformance_cases.cpp's ordering_problems
// checks it on each device; a device's work is one queue in the order it was given):
// - write() and read() return when done, and take their place in the queue: read() sees the
//   results of all execute() calls before it (it waits for them), and write() is not seen by
//   work queued before it (which reads the bytes as they were).
// - write_async() is queued like a kernel: after the work before it, before the work after it;
//   its source may be reused at once; its bytes are in place by the next synchronize().
// - execute() queues kernels and may return before they run; synchronize() returns when every
//   queued kernel and copy has finished. Callers free a buffer only when no queued work uses
//   it (after synchronize()).
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual size_t size() const = 0;
  virtual void* host_ptr() = 0;  // nullptr when not host-visible
  // What Tensor::data holds for the buffer's first byte: host_ptr() for host memory; for
  // device memory an opaque address that only the owning device maps back to its buffer.
  virtual void* address() { return host_ptr(); }
  virtual void write(size_t offset, const void* src, size_t n) = 0;
  virtual void read(size_t offset, void* dst, size_t n) const = 0;
  // Enqueues a copy from host memory on the owning device's stream: after the work queued
  // before it, before the work execute() queues after it. src may be reused as soon as it
  // returns; the bytes are in place after the device's next synchronize(). The default copies
  // at once (write()).
  virtual void write_async(size_t offset, const void* src, size_t n) { write(offset, src, n); }
};

struct DeviceOptions {
  int n_threads = 0;  // CPU: 0 = physical cores
  // Every token's outputs computed the same way whatever else is in the batch (how many
  // tokens, of which sequences), at some cost in speed (--deterministic). The CPU honours it;
  // other backends ignore it.
  bool batch_invariant = false;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;
  // Empty when the node can run here; otherwise the reason, in words, for reports.
  virtual std::string unsupported_reason(const Tensor& node) const = 0;
  bool supports(const Tensor& node) const { return unsupported_reason(node).empty(); }
  // True when kernels can read host memory in place (weights stay in the file mapping).
  virtual bool reads_host_memory() const = 0;
  virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
  // True when data (a Tensor::data) lies in one of this device's buffers. Only devices that do
  // not read host memory need to say; the scheduler copies other leaves in.
  virtual bool owns(const void* data) const {
    (void)data;
    return false;
  }
  // Enqueues nodes (in order) on the device's stream; data pointers are already assigned. The
  // scheduler passes only nodes for which supports() is true, with their operands in this
  // device's buffers (or in host memory, where reads_host_memory()); a backend may throw
  // BackendError on any other.
  virtual void execute(std::span<Tensor* const> nodes) = 0;
  virtual void synchronize() = 0;
  virtual int threads() const { return 1; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Api api() const = 0;
  virtual ProbeReport probe() = 0;
  virtual std::unique_ptr<Device> open_device(int index, const DeviceOptions& opts) = 0;
};

// Plugins export this C symbol; the registry calls it once after dlopen.
using BackendCreateFn = Backend* (*)();
inline constexpr const char* kBackendCreateSymbol = "polystack_backend_create";
// And this one, returning the kBackendAbiVersion they were built with: a plugin is C++ code
// against these structs, so one built for another layout is refused rather than called. Raise
// the number whenever a type in this header changes (graph/tensor.h's Tensor and OpKind too: 6
// added the mixture-of-experts ops and Tensor::experts, 7 swiglu_oai and a fifth source for
// attention's sinks).
inline constexpr int kBackendAbiVersion = 7;
// What version 7 covers, as it has it: changing the op list or Tensor's members fails here, and
// the numbers are raised with the version (sizes past the name, a std::string whose size the
// C++ library sets).
static_assert(int(OpKind::Count) == 21, "OpKind changed: raise kBackendAbiVersion");
static_assert(sizeof(Tensor) - sizeof(std::string) == 200,
              "Tensor changed: raise kBackendAbiVersion");
using BackendAbiFn = int (*)();
inline constexpr const char* kBackendAbiSymbol = "polystack_backend_abi";
// A plugin is built with hidden visibility (cmake/plugin.cmake): these two are its exports.
#define POLYSTACK_BACKEND_PLUGIN(create_expr)                                                 \
  extern "C" __attribute__((visibility("default"))) ps::Backend* polystack_backend_create() { \
    return create_expr;                                                                       \
  }                                                                                           \
  extern "C" __attribute__((visibility("default"))) int polystack_backend_abi() {             \
    return ps::kBackendAbiVersion;                                                            \
  }

}  // namespace ps
