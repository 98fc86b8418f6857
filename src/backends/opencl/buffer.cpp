// OpenCL buffers: device memory named by opaque addresses, and reads and writes that are
// blocking commands on the device's in-order queue, so they take their place after the work
// queued before them (backend.h's ordering) with no further synchronization.
#include <fmt/format.h>

#include <atomic>

#include "backends/opencl/device.h"
#include "core/error.h"

namespace ps::ocl {
namespace {

// Addresses that stand for device memory in Tensor::data: in the non-canonical range of x86-64
// and ARM64 (between the user and kernel halves), so never a host pointer, and apart from
// Vulkan's; never dereferenced, unique per buffer.
uintptr_t reserve_addresses(size_t bytes) {
  static std::atomic<uintptr_t> next{uintptr_t(0x9000) << 32};
  const uintptr_t span = (uintptr_t(bytes) + (uintptr_t(1) << 16)) & ~((uintptr_t(1) << 16) - 1);
  return next.fetch_add(span + (uintptr_t(1) << 16));
}

}  // namespace

OclBuffer::OclBuffer(OclDevice& dev, size_t bytes)
    : dev_(dev), size_(bytes), base_(reserve_addresses(bytes)) {
  if (bytes > dev.extras().max_alloc)
    throw BackendError(
        fmt::format("{}: a buffer of {} MiB is more than the device allocates at "
                    "once ({} MiB)",
                    dev.info().id, bytes >> 20, dev.extras().max_alloc >> 20));
  cl_int e = CL_SUCCESS;
  // Whole 16-byte units, and never empty (OpenCL refuses a buffer of 0 bytes).
  const size_t n = (bytes + 15) / 16 * 16 + (bytes == 0 ? 16 : 0);
  mem_ = dev.fn().clCreateBuffer(dev.context(), CL_MEM_READ_WRITE, n, nullptr, &e);
  if (e != CL_SUCCESS || !mem_)
    throw BackendError(fmt::format("{}: cannot allocate {} bytes of device memory: {}",
                                   dev.info().id, bytes, error_name(e)));
  dev.register_buffer(this);
}

OclBuffer::~OclBuffer() {
  dev_.unregister_buffer(this);
  dev_.fn().clReleaseMemObject(mem_);
}

void OclBuffer::check_range(const char* what, size_t offset, size_t n) const {
  if (offset > size_ || n > size_ - offset)
    throw BackendError(fmt::format("{}: {} of {} bytes at {} past a {}-byte buffer", dev_.info().id,
                                   what, n, offset, size_));
}

void OclBuffer::write(size_t offset, const void* src, size_t n) {
  check_range("write", offset, n);
  if (n == 0) return;
  check(dev_.fn().clEnqueueWriteBuffer(dev_.queue(), mem_, CL_TRUE, offset, n, src, 0, nullptr,
                                       nullptr),
        "clEnqueueWriteBuffer");
}

void OclBuffer::read(size_t offset, void* dst, size_t n) const {
  check_range("read", offset, n);
  if (n == 0) return;
  check(dev_.fn().clEnqueueReadBuffer(dev_.queue(), mem_, CL_TRUE, offset, n, dst, 0, nullptr,
                                      nullptr),
        "clEnqueueReadBuffer");
}

}  // namespace ps::ocl
