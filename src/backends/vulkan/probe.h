#pragma once
// Probing the Vulkan loader and drivers: devices with their facts, or why there are none.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backends/vulkan/loader.h"

namespace ps::vk {

// An instance with its entry points; destroyed with it.
struct Instance {
  const Loader* loader = nullptr;
  VkInstance handle = VK_NULL_HANDLE;
  uint32_t version = 0;  // the API version the instance was created for (at most 1.3)
  InstanceFunctions fns;
  ~Instance();
};

// Null with the reason (no loader, no driver, creation failed).
std::unique_ptr<Instance> create_instance(std::string* why);
// The process's instance, created on first use and kept (see the definition for why).
const Instance* process_instance(std::string* why);

// A physical device: the facts reported to users, and those the backend itself decides on.
struct DeviceExtras {
  DeviceInfo info;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  uint32_t api_version = 0;  // min(device, instance)
  uint32_t subgroup_size = 0;
  uint64_t max_storage_range = 0;    // the largest storage-buffer binding (maxStorageBufferRange)
  bool subgroup_arithmetic = false;  // subgroupAdd and friends in compute shaders
  bool subgroup_shuffle = false;     // subgroupShuffle in compute shaders
  bool fp16 = false, int8 = false, storage16 = false, storage8 = false;
  bool has_memory_budget = false, has_cooperative_matrix = false, has_integer_dot_product = false;
};

// Which matmul kernels suit the device: weight rows per subgroup lane (matmul_lanes.comp) on
// CPU drivers, which run a subgroup as the SIMD lanes of a thread; otherwise the GPU kernels:
// for a few activation rows, packed 8-bit integer dot products for quantized weights where the
// device has them (quantize_q8.comp, matmul_dot.comp), else subgroup lanes splitting each row
// (matmul.comp); staged 64 x 64 tiles for prompt batches (matmul_tile.comp).
// POLYSTACK_VULKAN_MATMUL=gpu forces the GPU kernels, =split the GPU kernels without integer
// dot products, so that every kernel is tested on CPU drivers.
bool lane_per_row_matmul(const DeviceExtras& x);
bool integer_dot_matmul(const DeviceExtras& x);

std::vector<DeviceExtras> enumerate(const Loader& l, VkInstance instance,
                                    const InstanceFunctions& f, uint32_t instance_version);

ProbeReport probe();

}  // namespace ps::vk
