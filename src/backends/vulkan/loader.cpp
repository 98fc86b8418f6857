#include "backends/vulkan/loader.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "core/error.h"

namespace ps::vk {

const Loader* loader(std::string* why) {
  static Loader l;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    // The versioned name is what the loader package installs; the bare name only comes with
    // the development package.
    void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      error = fmt::format(
          "the Vulkan loader libvulkan.so.1 was not found ({}); install it "
          "(Debian/Ubuntu: libvulkan1)",
          e ? e : "dlopen failed");
      return;
    }
    l.vkGetInstanceProcAddr =
        reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
    if (!l.vkGetInstanceProcAddr) {
      error = "libvulkan.so.1 has no vkGetInstanceProcAddr";
      dlclose(lib);
      return;
    }
#define POLYSTACK_VK_LOAD_GLOBAL(name) \
  l.name = reinterpret_cast<PFN_##name>(l.vkGetInstanceProcAddr(nullptr, #name));
    POLYSTACK_VK_GLOBAL_FUNCTIONS(POLYSTACK_VK_LOAD_GLOBAL)
#undef POLYSTACK_VK_LOAD_GLOBAL
    if (!l.vkCreateInstance) {
      error = "libvulkan.so.1 does not provide vkCreateInstance";
      dlclose(lib);
      return;
    }
    l.library = lib;
  });
  if (!l.library) {
    if (why) *why = error;
    return nullptr;
  }
  return &l;
}

bool load_instance_functions(const Loader& l, VkInstance instance, InstanceFunctions& f,
                             std::string* why) {
#define POLYSTACK_VK_LOAD_INSTANCE(name)                                           \
  f.name = reinterpret_cast<PFN_##name>(l.vkGetInstanceProcAddr(instance, #name)); \
  if (!f.name) {                                                                   \
    if (why) *why = fmt::format("the Vulkan loader does not provide {}", #name);   \
    return false;                                                                  \
  }
  POLYSTACK_VK_INSTANCE_FUNCTIONS(POLYSTACK_VK_LOAD_INSTANCE)
#undef POLYSTACK_VK_LOAD_INSTANCE
  return true;
}

bool load_device_functions(const InstanceFunctions& i, VkDevice device, DeviceFunctions& f,
                           std::string* why) {
#define POLYSTACK_VK_LOAD_DEVICE(name)                                           \
  f.name = reinterpret_cast<PFN_##name>(i.vkGetDeviceProcAddr(device, #name));   \
  if (!f.name) {                                                                 \
    if (why) *why = fmt::format("the Vulkan driver does not provide {}", #name); \
    return false;                                                                \
  }
  POLYSTACK_VK_DEVICE_FUNCTIONS(POLYSTACK_VK_LOAD_DEVICE)
#undef POLYSTACK_VK_LOAD_DEVICE
  return true;
}

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS)
    throw BackendError(fmt::format("vulkan: {} failed: {}", what, result_name(r)));
}

const char* result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS:
      return "VK_SUCCESS";
    case VK_INCOMPLETE:
      return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED:
      return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    default:
      return "VkResult error";
  }
}

std::string version_string(uint32_t v) {
  return fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v),
                     VK_API_VERSION_PATCH(v));
}

}  // namespace ps::vk
