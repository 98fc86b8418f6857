#include "backends/vulkan/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "backends/vulkan/shaders.h"
#include "core/error.h"

namespace ps::vk {
namespace {

constexpr uint32_t kSetsPerPool = 1024;
// src0, src1, output, a fourth input (attention's V), a fifth (attention's per-token data)
constexpr uint32_t kBindings = 6;

uint32_t elems(size_t bytes, size_t elem) { return uint32_t(bytes / elem); }

}  // namespace

VulkanDevice::VulkanDevice(const Instance& instance, const DeviceExtras& extras)
    : info_(extras.info), extras_(extras), ifn_(instance.fns) {
  const VkPhysicalDevice phys = extras.physical;

  uint32_t n_families = 0;
  ifn_.vkGetPhysicalDeviceQueueFamilyProperties(phys, &n_families, nullptr);
  std::vector<VkQueueFamilyProperties> families(n_families);
  ifn_.vkGetPhysicalDeviceQueueFamilyProperties(phys, &n_families, families.data());
  bool found = false;
  for (uint32_t i = 0; i < n_families && !found; ++i)
    if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      queue_family_ = i;
      found = true;
    }
  if (!found) throw BackendError(fmt::format("{}: the device has no compute queue", info_.id));

  VkPhysicalDeviceProperties props{};
  ifn_.vkGetPhysicalDeviceProperties(phys, &props);
  storage_alignment_ = std::max<VkDeviceSize>(props.limits.minStorageBufferOffsetAlignment, 4);
  max_storage_range_ = props.limits.maxStorageBufferRange;
  // POLYSTACK_VULKAN_MAX_BINDING_MIB lowers the limit so tests reach the sliced paths with
  // small tensors.
  if (const char* cap = std::getenv("POLYSTACK_VULKAN_MAX_BINDING_MIB"); cap && *cap) {
    const long mib = std::strtol(cap, nullptr, 10);
    if (mib > 0)
      max_storage_range_ = std::min<VkDeviceSize>(max_storage_range_, VkDeviceSize(mib) << 20);
  }
  lane_matmul_ = lane_per_row_matmul(extras);
  int_dot_matmul_ = integer_dot_matmul(extras);
  if (const char* fault = std::getenv("POLYSTACK_TEST_FAULT");
      fault && std::string_view(fault).starts_with("matmul:"))
    fault_matmul_ = dtype_from_name(std::string_view(fault).substr(7));
  if (const char* fault = std::getenv("POLYSTACK_TEST_FAULT");
      fault && std::string_view(fault).starts_with("refuse:"))
    refused_op_ = std::string(fault + 7);
  ifn_.vkGetPhysicalDeviceMemoryProperties(phys, &memory_);

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qi{};
  qi.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  qi.queueFamilyIndex = queue_family_;
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  VkPhysicalDeviceVulkan12Features v12{};
  v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  v12.shaderFloat16 = extras.fp16;
  v12.shaderInt8 = extras.int8;
  v12.storageBuffer8BitAccess = extras.storage8;
  VkPhysicalDeviceVulkan11Features v11{};
  v11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  v11.storageBuffer16BitAccess = extras.storage16;
  v11.pNext = &v12;
  // Packed 8-bit integer dot products (matmul_dot.comp), where the device has them.
  VkPhysicalDeviceShaderIntegerDotProductFeatures idot{};
  idot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
  idot.shaderIntegerDotProduct = VK_TRUE;
  const char* idot_ext = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
  if (extras.has_integer_dot_product) v12.pNext = &idot;
  VkDeviceCreateInfo di{};
  di.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  di.pNext = &v11;
  di.enabledExtensionCount = extras.has_integer_dot_product ? 1 : 0;
  di.ppEnabledExtensionNames = &idot_ext;
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  check(ifn_.vkCreateDevice(phys, &di, nullptr, &device_), "vkCreateDevice");
  std::string why;
  if (!load_device_functions(ifn_, device_, fn_, &why)) {
    // No table to destroy with: the entry point comes from the instance.
    throw BackendError(fmt::format("{}: {}", info_.id, why));
  }
  fn_.vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

  VkCommandPoolCreateInfo pi{};
  pi.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = queue_family_;
  check(fn_.vkCreateCommandPool(device_, &pi, nullptr, &pool_), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  ci.commandPool = pool_;
  ci.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ci.commandBufferCount = 1;
  check(fn_.vkAllocateCommandBuffers(device_, &ci, &cmd_), "vkAllocateCommandBuffers");
  VkFenceCreateInfo fi{};
  fi.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  check(fn_.vkCreateFence(device_, &fi, nullptr, &fence_), "vkCreateFence");

  VkDescriptorSetLayoutBinding bindings[kBindings]{};
  for (uint32_t i = 0; i < kBindings; ++i) {
    bindings[i].binding = i;
    bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bindings[i].descriptorCount = 1;
    bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo li{};
  li.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  li.bindingCount = kBindings;
  li.pBindings = bindings;
  check(fn_.vkCreateDescriptorSetLayout(device_, &li, nullptr, &set_layout_),
        "vkCreateDescriptorSetLayout");
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(Params)};
  VkPipelineLayoutCreateInfo pli{};
  pli.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &set_layout_;
  pli.pushConstantRangeCount = 1;
  pli.pPushConstantRanges = &range;
  check(fn_.vkCreatePipelineLayout(device_, &pli, nullptr, &pipeline_layout_),
        "vkCreatePipelineLayout");
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kBindings};
  VkDescriptorPoolCreateInfo dpi{};
  dpi.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
  dpi.maxSets = kSetsPerPool;
  dpi.poolSizeCount = 1;
  dpi.pPoolSizes = &size;
  check(fn_.vkCreateDescriptorPool(device_, &dpi, nullptr, &descriptors_),
        "vkCreateDescriptorPool");
  sets_left_ = kSetsPerPool;
}

VulkanDevice::~VulkanDevice() {
  if (!device_) return;
  fn_.vkDeviceWaitIdle(device_);
  scratch_.reset();  // before the device it belongs to
  for (auto& [name, p] : pipelines_) fn_.vkDestroyPipeline(device_, p, nullptr);
  if (descriptors_) fn_.vkDestroyDescriptorPool(device_, descriptors_, nullptr);
  if (pipeline_layout_) fn_.vkDestroyPipelineLayout(device_, pipeline_layout_, nullptr);
  if (set_layout_) fn_.vkDestroyDescriptorSetLayout(device_, set_layout_, nullptr);
  if (fence_) fn_.vkDestroyFence(device_, fence_, nullptr);
  if (pool_) fn_.vkDestroyCommandPool(device_, pool_, nullptr);
  fn_.vkDestroyDevice(device_, nullptr);
}

uint32_t VulkanDevice::memory_type(uint32_t allowed, bool staging, bool* host_visible) const {
  // Device-local memory the host can map (unified memory, resizable BAR, lavapipe) avoids
  // staging; otherwise device-local memory with staged copies.
  constexpr VkMemoryPropertyFlags kLocal = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  constexpr VkMemoryPropertyFlags kMappable =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const std::vector<VkMemoryPropertyFlags> order =
      staging ? std::vector<VkMemoryPropertyFlags>{kMappable}
              : std::vector<VkMemoryPropertyFlags>{kLocal | kMappable, kLocal, kMappable};
  for (VkMemoryPropertyFlags want : order) {
    for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i) {
      if (!(allowed & (1u << i))) continue;
      const VkMemoryPropertyFlags have = memory_.memoryTypes[i].propertyFlags;
      if ((have & want) == want) {
        *host_visible = (have & kMappable) == kMappable;
        return i;
      }
    }
  }
  throw BackendError(fmt::format("{}: no usable memory type for a buffer", info_.id));
}

void VulkanDevice::register_buffer(VulkanBuffer* b) { buffers_[b->base()] = b; }
void VulkanDevice::unregister_buffer(VulkanBuffer* b) { buffers_.erase(b->base()); }

const VulkanBuffer* VulkanDevice::buffer_at(uintptr_t addr) const {
  auto it = buffers_.upper_bound(addr);
  if (it == buffers_.begin()) return nullptr;
  --it;
  return addr - it->first < std::max<size_t>(it->second->size(), 1) ? it->second : nullptr;
}

bool VulkanDevice::owns(const void* data) const {
  return buffer_at(reinterpret_cast<uintptr_t>(data)) != nullptr;
}

Tensor& VulkanDevice::scratch(size_t bytes) {
  if (!scratch_ || scratch_->size() < bytes) {
    synchronize();  // work already recorded may use the old buffer
    scratch_.reset();
    scratch_ = std::make_unique<VulkanBuffer>(*this, std::max<size_t>(bytes, size_t(1) << 16));
    scratch_tensor_.name = "scratch";
    scratch_tensor_.type = DType::I32;
    scratch_tensor_.data = scratch_->address();
  }
  return scratch_tensor_;
}

std::unique_ptr<Buffer> VulkanDevice::alloc(size_t bytes) {
  return std::make_unique<VulkanBuffer>(*this, bytes);
}

void VulkanDevice::staged_copy(VulkanBuffer& b, size_t offset, void* host, size_t n,
                               bool to_device) {
  synchronize();  // the copy must see (or not overtake) the work already recorded
  VulkanBuffer staging(*this, n, true);
  if (to_device) staging.fill(host, n);
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(fn_.vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
  VkBufferCopy region{};
  region.size = n;
  if (to_device) {
    region.dstOffset = offset;
    fn_.vkCmdCopyBuffer(cmd_, staging.handle(), b.handle(), 1, &region);
  } else {
    region.srcOffset = offset;
    fn_.vkCmdCopyBuffer(cmd_, b.handle(), staging.handle(), 1, &region);
  }
  submit_and_wait();
  if (!to_device) staging.drain(host, n);
}

void VulkanDevice::record_upload(VulkanBuffer& b, size_t offset, const void* host, size_t n) {
  begin_if_needed();
  auto& staging = pending_uploads_.emplace_back(std::make_unique<VulkanBuffer>(*this, n, true));
  staging->fill(host, n);
  // After the shaders recorded before it (which may read or write the bytes), before the ones
  // recorded after it.
  barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
          VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
  VkBufferCopy region{};
  region.dstOffset = offset;
  region.size = n;
  fn_.vkCmdCopyBuffer(cmd_, staging->handle(), b.handle(), 1, &region);
  barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
          VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
}

void VulkanDevice::barrier(VkPipelineStageFlags src_stage, VkAccessFlags src_access,
                           VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
  VkMemoryBarrier b{};
  b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  b.srcAccessMask = src_access;
  b.dstAccessMask = dst_access;
  fn_.vkCmdPipelineBarrier(cmd_, src_stage, dst_stage, 0, 1, &b, 0, nullptr, 0, nullptr);
}

void VulkanDevice::submit_and_wait() {
  check(fn_.vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
  VkSubmitInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd_;
  check(fn_.vkQueueSubmit(queue_, 1, &si, fence_), "vkQueueSubmit");
  check(fn_.vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  check(fn_.vkResetFences(device_, 1, &fence_), "vkResetFences");
  check(fn_.vkResetCommandBuffer(cmd_, 0), "vkResetCommandBuffer");
}

VulkanDevice::Binding VulkanDevice::bind(const Tensor& t, size_t elem_bytes) const {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(t.data);
  const VulkanBuffer* found = buffer_at(addr);
  if (!found)
    throw BackendError(
        fmt::format("{}: tensor {} is not in a buffer of this device", info_.id, t.name));
  const VulkanBuffer& b = *found;
  const size_t offset = addr - b.base();
  const VkDeviceSize aligned = offset / storage_alignment_ * storage_alignment_;
  const VkDeviceSize range = std::min<VkDeviceSize>(b.bound_size() - aligned, max_storage_range_);
  // A shader would read past the binding (zeros or garbage) rather than fail: refuse instead.
  if (offset - aligned + t.n_bytes() > range)
    throw BackendError(
        fmt::format("{}: tensor {} ({} MiB) does not fit in one storage binding ({} MiB at most)",
                    info_.id, t.name, t.n_bytes() >> 20, max_storage_range_ >> 20));
  return {b.handle(), aligned, range, elems(offset - aligned, elem_bytes)};
}

int64_t VulkanDevice::rows_per_binding(const Tensor& t) const {
  // bind() may start up to one alignment before the tensor.
  const VkDeviceSize usable = max_storage_range_ - storage_alignment_;
  return std::max<int64_t>(1, int64_t(usable / std::max<size_t>(t.nb[1], 1)));
}

VkPipeline VulkanDevice::pipeline(const std::string& name) {
  if (auto it = pipelines_.find(name); it != pipelines_.end()) return it->second;
  const ShaderCode* code = find_shader(name);
  if (!code) throw BackendError(fmt::format("vulkan: no shader named {}", name));
  VkShaderModuleCreateInfo mi{};
  mi.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
  mi.codeSize = code->size;
  mi.pCode = reinterpret_cast<const uint32_t*>(code->bytes);
  VkShaderModule module = VK_NULL_HANDLE;
  check(fn_.vkCreateShaderModule(device_, &mi, nullptr, &module), "vkCreateShaderModule");
  VkComputePipelineCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  // Constant 0: the workgroup width of shaders that take it (local_size_x_id = 0), one subgroup.
  const uint32_t width =
      extras_.subgroup_size >= 1 && extras_.subgroup_size <= 64 ? extras_.subgroup_size : 64;
  const VkSpecializationMapEntry entry{0, 0, sizeof(uint32_t)};
  VkSpecializationInfo spec{};
  spec.mapEntryCount = 1;
  spec.pMapEntries = &entry;
  spec.dataSize = sizeof(width);
  spec.pData = &width;
  ci.stage.pSpecializationInfo = &spec;
  ci.layout = pipeline_layout_;
  VkPipeline p = VK_NULL_HANDLE;
  const VkResult r = fn_.vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &ci, nullptr, &p);
  fn_.vkDestroyShaderModule(device_, module, nullptr);
  check(r, "vkCreateComputePipelines");
  pipelines_.emplace(name, p);
  return p;
}

void VulkanDevice::begin_if_needed() {
  if (recording_) return;
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(fn_.vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
  recording_ = true;
}

void VulkanDevice::synchronize() {
  if (!recording_) return;
  recording_ = false;
  submit_and_wait();
  pending_uploads_.clear();
  check(fn_.vkResetDescriptorPool(device_, descriptors_, 0), "vkResetDescriptorPool");
  sets_left_ = kSetsPerPool;
}

void VulkanDevice::dispatch(const std::string& shader, Operand a, Operand b, Operand d, Operand v,
                            Params p, uint32_t gx, uint32_t gy, uint32_t gz, Operand e, Operand f) {
  if (sets_left_ == 0) synchronize();  // the pool is spent: run what is recorded first
  begin_if_needed();
  const VkPipeline pipe = pipeline(shader);
  VkDescriptorSetAllocateInfo ai{};
  ai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
  ai.descriptorPool = descriptors_;
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &set_layout_;
  VkDescriptorSet set = VK_NULL_HANDLE;
  check(fn_.vkAllocateDescriptorSets(device_, &ai, &set), "vkAllocateDescriptorSets");
  --sets_left_;

  if (!b.t) b = a;
  if (!v.t) v = d;
  if (!e.t) e = d;
  if (!f.t) f = d;
  const Binding ba = bind(*a.t, a.unit), bb = bind(*b.t, b.unit), bd = bind(*d.t, d.unit),
                bv = bind(*v.t, v.unit), be = bind(*e.t, e.unit), bf = bind(*f.t, f.unit);
  p.a_off = ba.first;
  p.b_off = bb.first;
  p.d_off = bd.first;
  p.v_off = bv.first;
  p.e_off = be.first;
  p.f_off = bf.first;
  VkDescriptorBufferInfo infos[kBindings] = {
      {ba.buffer, ba.offset, ba.range}, {bb.buffer, bb.offset, bb.range},
      {bd.buffer, bd.offset, bd.range}, {bv.buffer, bv.offset, bv.range},
      {be.buffer, be.offset, be.range}, {bf.buffer, bf.offset, bf.range}};
  VkWriteDescriptorSet writes[kBindings]{};
  for (uint32_t i = 0; i < kBindings; ++i) {
    writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    writes[i].dstSet = set;
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  fn_.vkUpdateDescriptorSets(device_, kBindings, writes, 0, nullptr);
  fn_.vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
  fn_.vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_layout_, 0, 1, &set, 0,
                              nullptr);
  fn_.vkCmdPushConstants(cmd_, pipeline_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(Params),
                         &p);
  fn_.vkCmdDispatch(cmd_, gx, gy, gz);
  // Every op reads what the ops before it wrote.
  barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
          VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
}

void VulkanDevice::execute(std::span<Tensor* const> nodes) {
  for (Tensor* n : nodes) {
    const std::string why = unsupported_reason(*n);
    if (!why.empty())
      throw BackendError(
          fmt::format("{}: cannot run {} ({}): {}", info_.id, op_name(n->op), n->name, why));
    run(*n);
  }
}

}  // namespace ps::vk
