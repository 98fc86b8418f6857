#pragma once
// The probe of the API this plugin is built for: devices with their facts, or why there are
// none. probe_cuda.cpp asks the NVIDIA driver (opened at run time, never linked); probe_hip.cpp
// asks the ROCm runtime.
#include "backend/backend.h"

namespace ps::gpu {

ProbeReport probe_devices();

}  // namespace ps::gpu
