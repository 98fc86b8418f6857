// The skeleton's buffers: bounds-checked host memory.
#include <fmt/format.h>

#include <cstring>

#include "backends/null/device.h"
#include "core/error.h"

namespace ps::null {

NullBuffer::NullBuffer(std::string device_id, size_t bytes)
    : device_id_(std::move(device_id)), bytes_(bytes) {}

void NullBuffer::check_range(const char* what, size_t offset, size_t n) const {
  if (offset > bytes_.size() || n > bytes_.size() - offset)
    throw BackendError(fmt::format("{}: {} of {} bytes at {} past a {}-byte buffer", device_id_,
                                   what, n, offset, bytes_.size()));
}

void NullBuffer::write(size_t offset, const void* src, size_t n) {
  check_range("write", offset, n);
  if (n) std::memcpy(bytes_.data() + offset, src, n);
}

void NullBuffer::read(size_t offset, void* dst, size_t n) const {
  check_range("read", offset, n);
  if (n) std::memcpy(dst, bytes_.data() + offset, n);
}

}  // namespace ps::null
