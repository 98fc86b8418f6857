// The skeleton's device: memory and the queue. A GPU backend creates its context, queue or
// stream and allocators here, and keeps the mapping from Tensor::data addresses to its buffers
// (Vulkan's device.cpp); the skeleton's memory is the host's and its queue is execute() itself.
#include "backends/null/device.h"

namespace ps::null {

std::unique_ptr<Buffer> NullDevice::alloc(size_t bytes) {
  return std::make_unique<NullBuffer>(info_.id, bytes);
}

}  // namespace ps::null
