#pragma once
// The probe of the API this plugin is built for: devices with their facts, or why there are
// none. cuda_probe.cu asks the NVIDIA driver (opened at run time, never linked); hip_probe.cpp
// asks the ROCm runtime.
#include "backend/backend.h"

namespace ps::gpu {

ProbeReport probe_devices();

}  // namespace ps::gpu
