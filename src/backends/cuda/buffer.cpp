// CUDA/HIP buffers: device memory, with copies on the device's stream (backend.h's ordering:
// a read waits for the work queued before it; a write is queued after it).
#include <fmt/format.h>

#include <cstring>

#include "backends/cuda/device.h"
#include "core/error.h"

namespace ps::gpu {

GpuBuffer::GpuBuffer(GpuDevice& dev, size_t bytes) : dev_(dev), size_(bytes) {
  dev_.activate();
  const cudaError_t e = cudaMalloc(&ptr_, std::max<size_t>(bytes, 1));
  if (e != cudaSuccess) {
    size_t free = 0, total = 0;
    (void)cudaGetLastError();
    (void)cudaMemGetInfo(&free, &total);
    throw BackendError(fmt::format("{}: cannot allocate {} MiB ({} MiB of {} MiB free): {}",
                                   dev_.info().id, bytes >> 20, free >> 20, total >> 20,
                                   cudaGetErrorString(e)));
  }
  dev_.register_buffer(ptr_, bytes);
}

GpuBuffer::~GpuBuffer() {
  dev_.unregister_buffer(ptr_);
  dev_.select_quietly();
  (void)cudaFree(ptr_);
}

void GpuBuffer::enqueue_write(size_t offset, const void* src, size_t n) {
  if (offset + n > size_)
    throw BackendError(fmt::format("{}: write past a buffer", dev_.info().id));
  dev_.activate();
  dev_.check(cudaMemcpyAsync(static_cast<char*>(ptr_) + offset, src, n, cudaMemcpyHostToDevice,
                             dev_.stream()),
             "copy to the device");
}

void GpuBuffer::write(size_t offset, const void* src, size_t n) {
  enqueue_write(offset, src, n);
  dev_.check(cudaStreamSynchronize(dev_.stream()), "copy to the device");
}

void GpuBuffer::write_async(size_t offset, const void* src, size_t n) {
#if defined(POLYSTACK_HIP)
  write(offset, src, n);
#else
  enqueue_write(offset, src, n);
#endif
}

void GpuBuffer::read(size_t offset, void* dst, size_t n) const {
  if (offset + n > size_) throw BackendError(fmt::format("{}: read past a buffer", dev_.info().id));
  dev_.activate();
  dev_.check(cudaMemcpyAsync(dst, static_cast<const char*>(ptr_) + offset, n,
                             cudaMemcpyDeviceToHost, dev_.stream()),
             "copy from the device");
  dev_.check(cudaStreamSynchronize(dev_.stream()), "copy from the device");
}

}  // namespace ps::gpu
