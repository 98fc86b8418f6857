#pragma once
// Probing the OpenCL ICD loader and its drivers: every device with its facts, or why there
// are none (no loader, no driver, drivers without devices).
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backends/opencl/loader.h"

namespace ps::ocl {

// A device: the facts reported to users, and those the backend itself decides on.
struct DeviceExtras {
  DeviceInfo info;
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  int cl_major = 0, cl_minor = 0;  // the device's OpenCL version
  uint64_t max_alloc = 0;          // the largest single buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE)
  size_t max_work_group = 0;
  bool fp16 = false, subgroups = false, integer_dot = false;
};

// Every device of every platform, numbered opencl:0, opencl:1, ... in the loader's order.
// Empty with the reason when there is none.
std::vector<DeviceExtras> enumerate(const Functions& f, std::string* why);

ProbeReport probe();

}  // namespace ps::ocl
