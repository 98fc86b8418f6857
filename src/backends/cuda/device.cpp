// A CUDA/HIP device: its stream, the map of its allocations, and waiting for its work.
#include "backends/cuda/device.h"

#include <fmt/format.h>

#include <cstdlib>

#include "backends/cuda/kernels.h"
#include "core/error.h"

namespace ps::gpu {

GpuDevice::GpuDevice(DeviceInfo info, int ordinal) : info_(std::move(info)), ordinal_(ordinal) {
  activate();
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, ordinal_), "reading the device's properties");
  warp_ = prop.warpSize;
  if (const cudaError_t e = kernel_image_status(); e != cudaSuccess)
    throw BackendError(fmt::format("{} ({}): this build's kernels cannot run here: {}", info_.id,
                                   info_.name, cudaGetErrorString(e)));
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
#if defined(PS_CUDA_GRAPHS)
  const char* graphs = std::getenv("POLYSTACK_CUDA_GRAPHS");
  use_graphs_ = graphs && std::strcmp(graphs, "1") == 0;
#endif
}

GpuDevice::~GpuDevice() {
#if defined(PS_CUDA_GRAPHS)
  if (graph_exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec_));
#endif
  if (stream_) {
    select_quietly();  // destructors do not throw
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
}

void GpuDevice::select_quietly() const { (void)cudaSetDevice(ordinal_); }

void GpuDevice::activate() const {
  const cudaError_t e = cudaSetDevice(ordinal_);
  if (e != cudaSuccess)
    throw BackendError(fmt::format("{} ({}): cannot select the device: {}", info_.id, info_.name,
                                   cudaGetErrorString(e)));
}

void GpuDevice::check(cudaError_t e, const char* what) const {
  if (e != cudaSuccess)
    throw BackendError(
        fmt::format("{} ({}): {} failed: {}", info_.id, info_.name, what, cudaGetErrorString(e)));
}

void GpuDevice::register_buffer(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  buffers_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
}

void GpuDevice::unregister_buffer(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.erase(reinterpret_cast<uintptr_t>(ptr));
}

bool GpuDevice::owns(const void* data) const {
  const auto addr = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.upper_bound(addr);
  if (it == buffers_.begin()) return false;
  --it;
  return addr < it->first + std::max<size_t>(it->second, 1);
}

std::unique_ptr<Buffer> GpuDevice::alloc(size_t bytes) {
  return std::make_unique<GpuBuffer>(*this, bytes);
}

void GpuDevice::synchronize() {
  activate();
  check(cudaStreamSynchronize(stream_), "running the queued kernels");
}

}  // namespace ps::gpu
