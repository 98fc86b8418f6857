#pragma once
// The op conformance cases: every op over the dtypes it takes and awkward shapes, on random data
// (tests/unit/conformance_test.cpp runs them on every device the registry opens; the GPU
// emulation tests run them on the CUDA/HIP kernels compiled for the host).
#include <memory>
#include <string>
#include <vector>

#include "backend/op_case.h"

namespace ps::conformance {

using Case = OpCase;

std::vector<std::unique_ptr<Case>> all_cases();

// The case helpers live with the self-check (backend/op_case.h).
inline std::vector<float> run_on(Device& dev, Case& c) { return run_case(dev, c); }
using ps::mismatches;

}  // namespace ps::conformance
