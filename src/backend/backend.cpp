#include "backend/backend.h"

namespace ps {

namespace {

// Each API's id (flags, device specs, JSON) and the name people know it by.
struct ApiNames {
  Api api;
  std::string_view id, display;
};
constexpr ApiNames kApiNames[] = {
    {Api::Cpu, "cpu", "CPU"},
    {Api::Cuda, "cuda", "CUDA"},
    {Api::Hip, "hip", "HIP"},
    {Api::Metal, "metal", "Metal"},
    {Api::Vulkan, "vulkan", "Vulkan"},
    {Api::OpenCL, "opencl", "OpenCL"},
    {Api::DirectML, "directml", "DirectML"},
    {Api::Null, "null", "Null (the skeleton)"},
};

const ApiNames* names_of(Api api) {
  for (const ApiNames& n : kApiNames)
    if (n.api == api) return &n;
  return nullptr;
}

}  // namespace

std::string_view api_name(Api api) {
  const ApiNames* n = names_of(api);
  return n ? n->id : "?";
}

std::string_view api_display_name(Api api) {
  const ApiNames* n = names_of(api);
  return n ? n->display : "?";
}

std::string_view device_kind_name(DeviceKind k) {
  switch (k) {
    case DeviceKind::Cpu:
      return "cpu";
    case DeviceKind::DiscreteGpu:
      return "discrete gpu";
    case DeviceKind::IntegratedGpu:
      return "integrated gpu";
    case DeviceKind::VirtualGpu:
      return "virtual gpu";
    case DeviceKind::Accelerator:
      return "accelerator";
  }
  return "?";
}

}  // namespace ps
