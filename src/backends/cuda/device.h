#pragma once
// One CUDA (or HIP) device: buffers in device memory, one stream that execute() queues every
// kernel on without waiting, and synchronize() to wait for them. Tensor::data of a tensor in a
// device buffer is its device address.
//
// CUDA graphs (POLYSTACK_CUDA_GRAPHS=1, CUDA only): each execute() is captured into a graph
// and launched as one; when its kernels are those of the previous run with other arguments
// (the next decode step), the instantiated graph is updated in place rather than built anew.
// Off by default until measured on hardware to help.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "backends/cuda/common.cuh"

// Where CUDA graphs can be used: CUDA itself (HIP and the host emulation launch node by node).
#if defined(POLYSTACK_CUDA) && !defined(POLYSTACK_GPU_EMULATION)
#define PS_CUDA_GRAPHS 1
#endif

namespace ps::gpu {

class GpuDevice;

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
  void execute_as_graph(std::span<Tensor* const> nodes);

  DeviceInfo info_;
  int ordinal_;
  int warp_ = 32;
  cudaStream_t stream_ = nullptr;
  bool use_graphs_ = false;
  [[maybe_unused]] void* graph_exec_ = nullptr;  // cudaGraphExec_t of the last run (CUDA only)
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> buffers_;  // base address -> bytes
};

}  // namespace ps::gpu
