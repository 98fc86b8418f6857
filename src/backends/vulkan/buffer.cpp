// Vulkan buffers: device memory (mapped where the host can see it) and the staging path for
// memory it cannot, and how their reads and writes take their place in the device's queue.
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "backends/vulkan/device.h"
#include "core/error.h"

namespace ps::vk {
namespace {

// Addresses that stand for device memory in Tensor::data: far above any user-space mapping of
// today's x86-64 and ARM64 kernels' defaults, never dereferenced, unique per buffer.
uintptr_t reserve_addresses(size_t bytes) {
  static std::atomic<uintptr_t> next{uintptr_t(0x7e00) << 32};
  const uintptr_t span = (uintptr_t(bytes) + (uintptr_t(1) << 16)) & ~((uintptr_t(1) << 16) - 1);
  return next.fetch_add(span + (uintptr_t(1) << 16));
}

bool always_stage() {
  static const bool on = [] {
    const char* v = std::getenv("POLYSTACK_VULKAN_STAGING");
    return v && std::string_view(v) == "1";
  }();
  return on;
}

}  // namespace

VulkanBuffer::VulkanBuffer(VulkanDevice& dev, size_t bytes, bool staging)
    : dev_(dev), size_(bytes), base_(reserve_addresses(bytes)) {
  const DeviceFunctions& f = dev.fn();
  VkBufferCreateInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  // Whole 16-byte units: shaders read through 32-bit (and wider) words, so the last bytes of
  // an odd-sized tensor must sit in a word inside the buffer.
  bi.size = bound_size();
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(f.vkCreateBuffer(dev.device(), &bi, nullptr, &buffer_), "vkCreateBuffer");
  VkMemoryRequirements req{};
  f.vkGetBufferMemoryRequirements(dev.device(), buffer_, &req);
  bool host_visible = false;
  VkMemoryAllocateInfo ai{};
  ai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = dev.memory_type(req.memoryTypeBits, staging, &host_visible);
  const VkResult r = f.vkAllocateMemory(dev.device(), &ai, nullptr, &memory_);
  if (r != VK_SUCCESS) {
    f.vkDestroyBuffer(dev.device(), buffer_, nullptr);
    throw BackendError(fmt::format("{}: cannot allocate {} bytes of device memory: {}",
                                   dev.info().id, bytes, result_name(r)));
  }
  check(f.vkBindBufferMemory(dev.device(), buffer_, memory_, 0), "vkBindBufferMemory");
  // POLYSTACK_VULKAN_STAGING=1 moves every byte through staging buffers, as on GPUs whose
  // memory the host cannot map, so that path is tested on devices whose memory it can.
  if (host_visible && (staging || !always_stage()))
    check(f.vkMapMemory(dev.device(), memory_, 0, VK_WHOLE_SIZE, 0, &mapped_), "vkMapMemory");
  dev.register_buffer(this);
}

VulkanBuffer::~VulkanBuffer() {
  dev_.unregister_buffer(this);
  const DeviceFunctions& f = dev_.fn();
  if (mapped_) f.vkUnmapMemory(dev_.device(), memory_);
  f.vkDestroyBuffer(dev_.device(), buffer_, nullptr);
  f.vkFreeMemory(dev_.device(), memory_, nullptr);
}

void VulkanBuffer::write(size_t offset, const void* src, size_t n) {
  if (offset > size_ || n > size_ - offset)
    throw BackendError(fmt::format("{}: write of {} bytes at {} past a {}-byte buffer",
                                   dev_.info().id, n, offset, size_));
  if (mapped_) {
    dev_.synchronize();  // work recorded before this write reads the bytes as they were
    std::memcpy(static_cast<char*>(mapped_) + offset, src, n);
  } else {
    dev_.staged_copy(*this, offset, const_cast<void*>(src), n, true);
  }
}

void VulkanBuffer::fill(const void* src, size_t n) {
  if (!mapped_ || n > size_)
    throw BackendError(fmt::format("{}: fill of {} bytes into a {}-byte staging buffer",
                                   dev_.info().id, n, size_));
  std::memcpy(mapped_, src, n);
}

void VulkanBuffer::drain(void* dst, size_t n) const {
  if (!mapped_ || n > size_)
    throw BackendError(fmt::format("{}: drain of {} bytes from a {}-byte staging buffer",
                                   dev_.info().id, n, size_));
  std::memcpy(dst, mapped_, n);
}

void VulkanBuffer::write_async(size_t offset, const void* src, size_t n) {
  if (offset > size_ || n > size_ - offset)
    throw BackendError(fmt::format("{}: write of {} bytes at {} past a {}-byte buffer",
                                   dev_.info().id, n, offset, size_));
  if (mapped_ && !dev_.recording())
    std::memcpy(static_cast<char*>(mapped_) + offset, src, n);
  else
    dev_.record_upload(*this, offset, src, n);
}

void VulkanBuffer::read(size_t offset, void* dst, size_t n) const {
  if (offset > size_ || n > size_ - offset)
    throw BackendError(fmt::format("{}: read of {} bytes at {} past a {}-byte buffer",
                                   dev_.info().id, n, offset, size_));
  if (mapped_) {
    dev_.synchronize();  // the results of the work recorded before this read
    std::memcpy(dst, static_cast<const char*>(mapped_) + offset, n);
  } else {
    dev_.staged_copy(const_cast<VulkanBuffer&>(*this), offset, dst, n, false);
  }
}

}  // namespace ps::vk
