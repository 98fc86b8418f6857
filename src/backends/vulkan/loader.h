#pragma once
// The Vulkan loader, opened at run time: the plugin links no Vulkan library, so it loads on
// machines without one and its probe can say so. Entry points are fetched through
// vkGetInstanceProcAddr into one table per instance.
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

namespace ps::vk {

#define POLYSTACK_VK_GLOBAL_FUNCTIONS(X) \
  X(vkCreateInstance)                    \
  X(vkEnumerateInstanceVersion)          \
  X(vkEnumerateInstanceLayerProperties)

#define POLYSTACK_VK_INSTANCE_FUNCTIONS(X)    \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceMemoryProperties2)     \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)

#define POLYSTACK_VK_DEVICE_FUNCTIONS(X) \
  X(vkDestroyDevice)                     \
  X(vkGetDeviceQueue)                    \
  X(vkDeviceWaitIdle)                    \
  X(vkCreateBuffer)                      \
  X(vkDestroyBuffer)                     \
  X(vkGetBufferMemoryRequirements)       \
  X(vkAllocateMemory)                    \
  X(vkFreeMemory)                        \
  X(vkBindBufferMemory)                  \
  X(vkMapMemory)                         \
  X(vkUnmapMemory)                       \
  X(vkCreateShaderModule)                \
  X(vkDestroyShaderModule)               \
  X(vkCreateDescriptorSetLayout)         \
  X(vkDestroyDescriptorSetLayout)        \
  X(vkCreatePipelineLayout)              \
  X(vkDestroyPipelineLayout)             \
  X(vkCreateComputePipelines)            \
  X(vkDestroyPipeline)                   \
  X(vkCreateDescriptorPool)              \
  X(vkDestroyDescriptorPool)             \
  X(vkResetDescriptorPool)               \
  X(vkAllocateDescriptorSets)            \
  X(vkUpdateDescriptorSets)              \
  X(vkCreateCommandPool)                 \
  X(vkDestroyCommandPool)                \
  X(vkAllocateCommandBuffers)            \
  X(vkBeginCommandBuffer)                \
  X(vkEndCommandBuffer)                  \
  X(vkResetCommandBuffer)                \
  X(vkCmdBindPipeline)                   \
  X(vkCmdBindDescriptorSets)             \
  X(vkCmdPushConstants)                  \
  X(vkCmdDispatch)                       \
  X(vkCmdPipelineBarrier)                \
  X(vkCmdCopyBuffer)                     \
  X(vkQueueSubmit)                       \
  X(vkCreateFence)                       \
  X(vkDestroyFence)                      \
  X(vkWaitForFences)                     \
  X(vkResetFences)

#define POLYSTACK_VK_DECLARE(name) PFN_##name name = nullptr;

struct Loader {
  void* library = nullptr;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  POLYSTACK_VK_GLOBAL_FUNCTIONS(POLYSTACK_VK_DECLARE)
};

struct InstanceFunctions {
  POLYSTACK_VK_INSTANCE_FUNCTIONS(POLYSTACK_VK_DECLARE)
};

struct DeviceFunctions {
  POLYSTACK_VK_DEVICE_FUNCTIONS(POLYSTACK_VK_DECLARE)
};

// The process's loader, opened on first use; null with the reason when it cannot be opened.
const Loader* loader(std::string* why);

// Fetches every instance-level entry point; false (with the missing name) if one is absent.
bool load_instance_functions(const Loader& l, VkInstance instance, InstanceFunctions& f,
                             std::string* why);

// Fetches every device-level entry point; false (with the missing name) if one is absent.
bool load_device_functions(const InstanceFunctions& i, VkDevice device, DeviceFunctions& f,
                           std::string* why);

// "VK_ERROR_INCOMPATIBLE_DRIVER" and the like, for messages.
const char* result_name(VkResult r);

// Throws BackendError naming the call and the result unless r is VK_SUCCESS.
void check(VkResult r, const char* what);

// "1.3.239"
std::string version_string(uint32_t v);

}  // namespace ps::vk
