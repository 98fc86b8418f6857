#pragma once
// One Vulkan device: a logical device with one compute queue, buffers in device memory, the
// pipelines of the embedded shaders (created on first use and kept), and one command buffer
// that execute() records into and synchronize() submits: one submission per graph run, not per
// op.
//
// Tensor::data of a tensor in a Vulkan buffer is an opaque address (Buffer::address()): each
// buffer owns a range of a reserved address space that is never dereferenced, and the device
// maps an address back to (buffer, offset) when it binds the tensor.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "backend/backend.h"
#include "backend/kernel_params.h"
#include "backends/vulkan/probe.h"

namespace ps::vk {

class VulkanDevice;

class VulkanBuffer final : public Buffer {
 public:
  // staging: host-visible memory for copies to and from device-local buffers.
  VulkanBuffer(VulkanDevice& dev, size_t bytes, bool staging = false);
  ~VulkanBuffer() override;
  size_t size() const override { return size_; }
  void* host_ptr() override { return nullptr; }
  void* address() override { return reinterpret_cast<void*>(base_); }
  void write(size_t offset, const void* src, size_t n) override;
  void read(size_t offset, void* dst, size_t n) const override;
  // Mapped memory with nothing recorded: a memcpy. Otherwise a copy from a staging buffer
  // recorded into the device's command buffer, with barriers against the work around it.
  void write_async(size_t offset, const void* src, size_t n) override;

  VkBuffer handle() const { return buffer_; }
  // The VkBuffer's size: the bytes asked for, rounded up to whole 16-byte units.
  size_t bound_size() const { return (std::max<size_t>(size_, 1) + 15) / 16 * 16; }
  uintptr_t base() const { return base_; }
  // A staging buffer's own bytes, at once: no recorded work reads or writes a staging buffer
  // before the copy recorded after these calls (write() and read() would wait for the work
  // recorded so far, which a staging buffer's user may itself be recording).
  void fill(const void* src, size_t n);
  void drain(void* dst, size_t n) const;

 private:
  VulkanDevice& dev_;
  size_t size_;
  uintptr_t base_;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  void* mapped_ = nullptr;  // set when the memory is host-visible and coherent
};

// Push constants shared by every shader (backend/kernel_params.h; shaders/common.glsl declares
// the same list), within the 128 bytes every device must offer.
using Params = KernelParams;
static_assert(sizeof(Params) <= 128);

class VulkanDevice final : public Device {
 public:
  VulkanDevice(const Instance& instance, const DeviceExtras& extras);
  ~VulkanDevice() override;

  const DeviceInfo& info() const override { return info_; }
  std::string unsupported_reason(const Tensor& node) const override;
  bool reads_host_memory() const override { return false; }
  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  bool owns(const void* data) const override;
  void execute(std::span<Tensor* const> nodes) override;
  void synchronize() override;

  // For buffers and ops.
  const DeviceFunctions& fn() const { return fn_; }
  VkDevice device() const { return device_; }
  uint32_t memory_type(uint32_t allowed_bits, bool staging, bool* host_visible) const;
  void register_buffer(VulkanBuffer* b);
  void unregister_buffer(VulkanBuffer* b);
  // Copies between a host-visible staging buffer and b, waiting for the copy.
  void staged_copy(VulkanBuffer& b, size_t offset, void* host, size_t n, bool to_device);
  // The recorded upload of write_async; its staging buffer lives until synchronize().
  void record_upload(VulkanBuffer& b, size_t offset, const void* host, size_t n);
  bool recording() const { return recording_; }
  // A memory barrier recorded into the command buffer.
  void barrier(VkPipelineStageFlags src_stage, VkAccessFlags src_access,
               VkPipelineStageFlags dst_stage, VkAccessFlags dst_access);

 private:
  struct Binding {
    VkBuffer buffer;
    VkDeviceSize offset;  // aligned down to the device's storage-buffer alignment
    VkDeviceSize range;   // to the end of the buffer, at most the device's largest range
    uint32_t first;       // the tensor's first element after that offset
  };
  // The buffer whose bytes hold address addr, or null.
  const VulkanBuffer* buffer_at(uintptr_t addr) const;
  // BackendError when t does not fit in one binding (see rows_per_binding).
  Binding bind(const Tensor& t, size_t elem_bytes) const;
  // Rows of t (dimension 1) that one storage binding surely holds, wherever t starts.
  int64_t rows_per_binding(const Tensor& t) const;
  VkPipeline pipeline(const std::string& name);
  void begin_if_needed();
  // Ends the command buffer, submits it, waits for it, and resets it for the next recording.
  void submit_and_wait();
  // A tensor bound to a shader, with the unit of its strides and offset (bytes for weights read
  // through weights.glsl, otherwise the element size).
  struct Operand {
    const Tensor* t;
    size_t unit;
  };
  // Binds a (binding 0), b (1; a again when null), d (2), v (3; d again when null), e (4; d
  // again when null) and f (5; d again when null), fills the offsets of p and records the
  // dispatch.
  void dispatch(const std::string& shader, Operand a, Operand b, Operand d, Operand v, Params p,
                uint32_t gx, uint32_t gy, uint32_t gz, Operand e = {nullptr, 0},
                Operand f = {nullptr, 0});
  void run(Tensor& node);
  // A tensor over a device buffer of at least `bytes` for values one kernel passes to the next
  // within a run (quantized activations); grown as needed, after the work recorded so far.
  Tensor& scratch(size_t bytes);

  DeviceInfo info_;
  DeviceExtras extras_;
  const InstanceFunctions& ifn_;
  DeviceFunctions fn_{};
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkPhysicalDeviceMemoryProperties memory_{};
  VkDeviceSize storage_alignment_ = 16;
  VkDeviceSize max_storage_range_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout pipeline_layout_ = VK_NULL_HANDLE;
  VkDescriptorPool descriptors_ = VK_NULL_HANDLE;
  uint32_t sets_left_ = 0;
  bool recording_ = false;
  bool lane_matmul_ = false;
  bool int_dot_matmul_ =
      false;  // matmul_dot.comp for a few activation rows (integer_dot_matmul)  //
              // matmul_lanes.comp instead of matmul.comp (lane_per_row_matmul)
  // A test hook (POLYSTACK_TEST_FAULT=matmul:TYPE): the outputs of matmuls with weights of
  // this type are scaled by 1.25 on the device, so tests can see the self-check catch a wrong
  // kernel.
  std::optional<DType> fault_matmul_;
  // Another (POLYSTACK_TEST_FAULT=refuse:OP, an op_name): the device says it cannot run that
  // op, so tests see it run elsewhere and named in the placement report.
  std::string refused_op_;
  std::unordered_map<std::string, VkPipeline> pipelines_;
  std::map<uintptr_t, VulkanBuffer*> buffers_;                  // by base address
  std::vector<std::unique_ptr<VulkanBuffer>> pending_uploads_;  // record_upload's staging
  std::unique_ptr<VulkanBuffer> scratch_;
  Tensor scratch_tensor_;
};

}  // namespace ps::vk
