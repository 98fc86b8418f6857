#pragma once
// One CUDA (or HIP) device: buffers in device memory, one stream that execute() queues every
// kernel on without waiting, and synchronize() to wait for them. Tensor::data of a tensor in a
// device buffer is its device address.
//
// CUDA graphs (POLYSTACK_CUDA_GRAPHS=1, CUDA only): each execute() is captured into a graph
// and launched as one; when its kernels are those of the previous run with other arguments
// (the next decode step), the instantiated graph is updated in place rather than built anew.
// Off by default until measured on hardware to help.
//
// POLYSTACK_CUDA_MATVEC=dp4a: decode steps of Q4_K, Q6_K and Q8_0 weights with activations
// rounded to int8 and integer dot products (matmul.cu), in scratch memory the device keeps;
// `float` (the default) keeps the float kernels. A candidate until measured on hardware.
//
// POLYSTACK_PROFILE_OPS=1: the device times its kernels with events, by op (matrix products
// also by weight type and activation rows), waiting for each run's kernels at its end, and
// prints the totals to stderr when it is closed, slowest first, with the time between each
// run's first and last kernel (what the kernels leave of it is launch overhead and gaps).
// Under CUDA graphs a run's graph is timed as one.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backends/cuda/common.cuh"

// Where CUDA graphs can be used: CUDA itself (HIP and the host emulation launch node by node).
#if defined(POLYSTACK_CUDA) && !defined(POLYSTACK_GPU_EMULATION)
#define PS_CUDA_GRAPHS 1
#endif

namespace ps::gpu {

class GpuDevice;

// POLYSTACK_PROFILE_OPS's times (see above).
class GpuOpProfile {
 public:
  // Null unless POLYSTACK_PROFILE_OPS is set (and not 0).
  static std::unique_ptr<GpuOpProfile> from_environment(const GpuDevice& dev);
  explicit GpuOpProfile(const GpuDevice& dev) : dev_(dev) {}
  ~GpuOpProfile();  // prints the totals
  // Records an event on the stream; its index for add().
  int mark(cudaStream_t stream);
  // The time between two marks counts for `what`.
  void add(std::string what, int start, int end);
  // Waits for the run's events and adds their times to the totals.
  void collect();

 private:
  struct Total {
    uint64_t calls = 0;
    double ms = 0;
  };
  const GpuDevice& dev_;
  std::vector<cudaEvent_t> events_;
  int used_ = 0;
  std::vector<std::tuple<std::string, int, int>> pending_;
  std::map<std::string, Total> totals_;
  double span_ms_ = 0;  // each run's first kernel to its last, summed
  uint64_t runs_ = 0;
};

class GpuBuffer final : public Buffer {
 public:
  GpuBuffer(GpuDevice& dev, size_t bytes);
  ~GpuBuffer() override;
  size_t size() const override { return size_; }
  void* host_ptr() override { return nullptr; }
  void* address() override { return ptr_; }
  // Ordered with the kernels queued on the device's stream; returns when the copy is done.
  void write(size_t offset, const void* src, size_t n) override;
  void read(size_t offset, void* dst, size_t n) const override;
  // cudaMemcpyAsync on the stream, not waited for: from pageable memory CUDA stages the bytes
  // before it returns, so src may be reused. HIP gives no such promise: there it waits.
  void write_async(size_t offset, const void* src, size_t n) override;

 private:
  void enqueue_write(size_t offset, const void* src, size_t n);
  GpuDevice& dev_;
  size_t size_;
  void* ptr_ = nullptr;
};

class GpuDevice final : public Device {
 public:
  // ordinal: the runtime's device index; throws BackendError when the device cannot be used.
  GpuDevice(DeviceInfo info, int ordinal);
  ~GpuDevice() override;

  const DeviceInfo& info() const override { return info_; }
  std::string unsupported_reason(const Tensor& node) const override;
  bool reads_host_memory() const override { return false; }
  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  bool owns(const void* data) const override;
  void execute(std::span<Tensor* const> nodes) override;
  void synchronize() override;

  // For buffers.
  void activate() const;        // makes this device current for the calling thread
  void select_quietly() const;  // the same without throwing, for destructors
  cudaStream_t stream() const { return stream_; }
  // Throws BackendError naming the device and what failed when e is not cudaSuccess.
  void check(cudaError_t e, const char* what) const;
  void register_buffer(void* ptr, size_t bytes);
  void unregister_buffer(void* ptr);

 private:
  void launch_all(std::span<Tensor* const> nodes);
  void launch(Tensor& node);
  void execute_as_graph(std::span<Tensor* const> nodes);

  DeviceInfo info_;
  int ordinal_;
  int warp_ = 32;
  cudaStream_t stream_ = nullptr;
  bool use_graphs_ = false;
  [[maybe_unused]] void* graph_exec_ = nullptr;  // cudaGraphExec_t of the last run (CUDA only)
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> buffers_;    // base address -> bytes
  std::unique_ptr<GpuOpProfile> profile_;  // null unless POLYSTACK_PROFILE_OPS is set
  bool capturing_ = false;                 // inside a graph capture: kernels are not timed
  bool int8_decode_ = false;               // POLYSTACK_CUDA_MATVEC=dp4a
  void* scratch_ = nullptr;                // Launch::scratch
  size_t scratch_bytes_ = 0;
};

}  // namespace ps::gpu
