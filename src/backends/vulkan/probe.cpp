// What the Vulkan loader and its drivers offer: every physical device with the facts that
// decide whether and how polystack can use it, or the precise reason there is none.
#include "backends/vulkan/probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/pci_vendor.h"

namespace ps::vk {
namespace {

// Vulkan reports PCI vendor ids, or Khronos ids for vendors without one (Mesa's CPU drivers).
std::string vendor_name(uint32_t id) {
  return id == VK_VENDOR_ID_MESA ? "Mesa" : pci_vendor_name(id);
}

DeviceKind device_kind(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return DeviceKind::DiscreteGpu;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return DeviceKind::IntegratedGpu;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return DeviceKind::VirtualGpu;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return DeviceKind::Cpu;
    default:
      return DeviceKind::Accelerator;
  }
}

std::string uuid_string(const uint8_t (&u)[VK_UUID_SIZE]) {
  std::string s;
  for (uint32_t i = 0; i < VK_UUID_SIZE; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += fmt::format("{:02x}", u[i]);
  }
  return s;
}

const char* yes_no(bool b) { return b ? "yes" : "no"; }

// Where the loader was told to look for drivers, for the "no driver" message.
std::string driver_search_note() {
  for (const char* var : {"VK_DRIVER_FILES", "VK_ICD_FILENAMES"})
    if (const char* v = std::getenv(var); v && *v) return fmt::format(" ({} is set to {})", var, v);
  return {};
}

}  // namespace

bool lane_per_row_matmul(const DeviceExtras& x) {
  const char* force = std::getenv("POLYSTACK_VULKAN_MATMUL");
  if (force && (std::string_view(force) == "gpu" || std::string_view(force) == "split"))
    return false;
  const uint32_t s = x.subgroup_size;
  return x.info.kind == DeviceKind::Cpu && x.subgroup_shuffle && s >= 1 && s <= 32 && 32 % s == 0;
}

bool integer_dot_matmul(const DeviceExtras& x) {
  const char* force = std::getenv("POLYSTACK_VULKAN_MATMUL");
  return x.has_integer_dot_product && !(force && std::string_view(force) == "split");
}

std::vector<DeviceExtras> enumerate(const Loader& l, VkInstance instance,
                                    const InstanceFunctions& f, uint32_t instance_version) {
  uint32_t count = 0;
  f.vkEnumeratePhysicalDevices(instance, &count, nullptr);
  std::vector<VkPhysicalDevice> phys(count);
  f.vkEnumeratePhysicalDevices(instance, &count, phys.data());
  phys.resize(count);
  (void)l;

  std::vector<DeviceExtras> out;
  for (uint32_t i = 0; i < count; ++i) {
    DeviceExtras x;
    x.physical = phys[i];
    DeviceInfo& d = x.info;
    d.id = fmt::format("vulkan:{}", i);
    d.api = Api::Vulkan;

    uint32_t n_ext = 0;
    f.vkEnumerateDeviceExtensionProperties(phys[i], nullptr, &n_ext, nullptr);
    std::vector<VkExtensionProperties> exts(n_ext);
    f.vkEnumerateDeviceExtensionProperties(phys[i], nullptr, &n_ext, exts.data());
    const auto has_ext = [&](const char* name) {
      return std::any_of(exts.begin(), exts.end(), [&](const VkExtensionProperties& e) {
        return std::strcmp(e.extensionName, name) == 0;
      });
    };
    x.has_memory_budget = has_ext(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    x.has_cooperative_matrix = has_ext("VK_KHR_cooperative_matrix");
    x.has_integer_dot_product = has_ext(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);

    VkPhysicalDeviceProperties base{};
    f.vkGetPhysicalDeviceProperties(phys[i], &base);
    x.api_version = std::min(base.apiVersion, instance_version);
    x.max_storage_range = base.limits.maxStorageBufferRange;
    d.kind = device_kind(base.deviceType);
    d.name = base.deviceName;
    d.vendor = vendor_name(base.vendorID);
    d.runtime_version = fmt::format("Vulkan {}", version_string(base.apiVersion));

    if (x.api_version < VK_API_VERSION_1_2) {
      d.unusable = fmt::format(
          "it offers Vulkan {} through this loader; polystack needs Vulkan 1.2 or newer",
          version_string(x.api_version));
    } else {
      VkPhysicalDeviceDriverProperties driver{};
      driver.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
      VkPhysicalDeviceIDProperties ids{};
      ids.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES;
      ids.pNext = &driver;
      // The PCI address, so the GPU is matched with its CUDA or HIP view when the UUIDs differ.
      VkPhysicalDevicePCIBusInfoPropertiesEXT pci{};
      pci.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT;
      const bool has_pci = has_ext(VK_EXT_PCI_BUS_INFO_EXTENSION_NAME);
      if (has_pci) driver.pNext = &pci;
      VkPhysicalDeviceSubgroupProperties subgroup{};
      subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
      subgroup.pNext = &ids;
      VkPhysicalDeviceProperties2 props{};
      props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
      props.pNext = &subgroup;
      f.vkGetPhysicalDeviceProperties2(phys[i], &props);
      d.driver_version = driver.driverInfo[0]
                             ? fmt::format("{} ({})", driver.driverName, driver.driverInfo)
                             : std::string(driver.driverName);
      d.uuid = uuid_string(ids.deviceUUID);
      if (has_pci)
        d.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", pci.pciDomain, pci.pciBus,
                                   pci.pciDevice, pci.pciFunction);
      x.subgroup_size = subgroup.subgroupSize;
      x.subgroup_arithmetic = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                              (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
      x.subgroup_shuffle = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                           (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);

      VkPhysicalDeviceShaderIntegerDotProductFeatures idot{};
      idot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
      VkPhysicalDeviceVulkan12Features v12{};
      v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
      if (x.has_integer_dot_product) v12.pNext = &idot;
      VkPhysicalDeviceVulkan11Features v11{};
      v11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
      v11.pNext = &v12;
      VkPhysicalDeviceFeatures2 feats{};
      feats.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
      feats.pNext = &v11;
      f.vkGetPhysicalDeviceFeatures2(phys[i], &feats);
      x.fp16 = v12.shaderFloat16;
      x.int8 = v12.shaderInt8;
      x.storage16 = v11.storageBuffer16BitAccess;
      x.storage8 = v12.storageBuffer8BitAccess;
      x.has_integer_dot_product = x.has_integer_dot_product && idot.shaderIntegerDotProduct;
    }

    VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{};
    budget.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT;
    VkPhysicalDeviceMemoryProperties2 mem2{};
    mem2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2;
    if (x.has_memory_budget) mem2.pNext = &budget;
    if (x.api_version >= VK_API_VERSION_1_1)
      f.vkGetPhysicalDeviceMemoryProperties2(phys[i], &mem2);
    else
      f.vkGetPhysicalDeviceMemoryProperties(phys[i], &mem2.memoryProperties);
    const VkPhysicalDeviceMemoryProperties& mem = mem2.memoryProperties;
    bool all_host_visible = true;
    for (uint32_t h = 0; h < mem.memoryHeapCount; ++h) {
      if (!(mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)) continue;
      d.memory_total += mem.memoryHeaps[h].size;
      if (x.has_memory_budget && budget.heapBudget[h] >= budget.heapUsage[h])
        d.memory_free += budget.heapBudget[h] - budget.heapUsage[h];
    }
    for (uint32_t t = 0; t < mem.memoryTypeCount; ++t) {
      const VkMemoryPropertyFlags fl = mem.memoryTypes[t].propertyFlags;
      if ((fl & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && !(fl & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
        all_host_visible = false;
    }
    d.unified_memory =
        d.kind == DeviceKind::IntegratedGpu || d.kind == DeviceKind::Cpu || all_host_visible;

    d.facts.emplace_back("Vulkan API used",
                         fmt::format("{}.{}", VK_API_VERSION_MAJOR(x.api_version),
                                     VK_API_VERSION_MINOR(x.api_version)));
    if (x.subgroup_size) d.facts.emplace_back("subgroup size", std::to_string(x.subgroup_size));
    d.facts.emplace_back("largest storage binding",
                         fmt::format("{} MiB", x.max_storage_range >> 20));
    d.facts.emplace_back("subgroup arithmetic in compute", yes_no(x.subgroup_arithmetic));
    d.facts.emplace_back("subgroup shuffle in compute", yes_no(x.subgroup_shuffle));
    d.facts.emplace_back("fp16 arithmetic", yes_no(x.fp16));
    d.facts.emplace_back("int8 arithmetic", yes_no(x.int8));
    d.facts.emplace_back("16-bit storage", yes_no(x.storage16));
    d.facts.emplace_back("8-bit storage", yes_no(x.storage8));
    d.facts.emplace_back("integer dot product", yes_no(x.has_integer_dot_product));
    d.facts.emplace_back("cooperative matrix", yes_no(x.has_cooperative_matrix));
    d.facts.emplace_back("matmul kernels",
                         lane_per_row_matmul(x) ? "weight rows per subgroup lane (CPU driver)"
                         : integer_dot_matmul(x)
                             ? "8-bit integer dot products (decode), 64x64 tiles (prompts)"
                             : "split rows (decode), 64x64 tiles (prompts)");
    d.facts.emplace_back("memory budget",
                         x.has_memory_budget ? "reported (VK_EXT_memory_budget)" : "not reported");
    out.push_back(std::move(x));
  }
  return out;
}

Instance::~Instance() {
  if (handle && fns.vkDestroyInstance) fns.vkDestroyInstance(handle, nullptr);
}

std::unique_ptr<Instance> create_instance(std::string* why) {
  const Loader* l = loader(why);
  if (!l) return nullptr;
  auto inst = std::make_unique<Instance>();
  inst->loader = l;
  uint32_t version = VK_API_VERSION_1_0;
  if (l->vkEnumerateInstanceVersion) l->vkEnumerateInstanceVersion(&version);
  inst->version = std::min<uint32_t>(version, VK_API_VERSION_1_3);

  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "polystack";
  app.pEngineName = "polystack";
  app.apiVersion = inst->version;
  VkInstanceCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  ci.pApplicationInfo = &app;
  const VkResult r = l->vkCreateInstance(&ci, nullptr, &inst->handle);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
    *why = fmt::format(
        "the Vulkan loader found no driver (ICD){}: install the Vulkan driver for your GPU "
        "(Mesa: mesa-vulkan-drivers; NVIDIA and AMD: the vendor's driver)",
        driver_search_note());
    return nullptr;
  }
  if (r != VK_SUCCESS) {
    *why = fmt::format("vkCreateInstance failed: {}", result_name(r));
    return nullptr;
  }
  if (!load_instance_functions(*l, inst->handle, inst->fns, why)) return nullptr;
  return inst;
}

const Instance* process_instance(std::string* why) {
  // One instance for the life of the process, never destroyed: drivers load with the first
  // instance and unload with the last, and some leave allocations behind when unloaded (which
  // leak checkers then cannot even attribute). Creating it once also keeps repeated probes cheap.
  static std::string error;
  static const Instance* instance = [] {
    std::unique_ptr<Instance> inst = create_instance(&error);
    return inst.release();
  }();
  if (!instance && why) *why = error;
  return instance;
}

ProbeReport probe() {
  ProbeReport r;
  r.api = Api::Vulkan;
  r.built = true;
  std::string why;
  const Instance* inst = process_instance(&why);
  if (!inst) {
    r.reason = why;
    return r;
  }
  for (DeviceExtras& x : enumerate(*inst->loader, inst->handle, inst->fns, inst->version))
    r.devices.push_back(std::move(x.info));
  if (r.devices.empty())
    r.reason =
        fmt::format("a Vulkan driver is installed{} but reports no devices", driver_search_note());
  return r;
}

}  // namespace ps::vk
