#include "backend/backend.h"

namespace ps {

std::string_view api_name(Api api) {
  switch (api) {
    case Api::Cpu:
      return "cpu";
    case Api::Cuda:
      return "cuda";
    case Api::Hip:
      return "hip";
    case Api::Metal:
      return "metal";
    case Api::Vulkan:
      return "vulkan";
    case Api::OpenCL:
      return "opencl";
    case Api::DirectML:
      return "directml";
  }
  return "?";
}

std::string_view api_display_name(Api api) {
  switch (api) {
    case Api::Cpu:
      return "CPU";
    case Api::Cuda:
      return "CUDA";
    case Api::Hip:
      return "HIP";
    case Api::Metal:
      return "Metal";
    case Api::Vulkan:
      return "Vulkan";
    case Api::OpenCL:
      return "OpenCL";
    case Api::DirectML:
      return "DirectML";
  }
  return "?";
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
