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

// The ordering backend.h promises, checked on one device through its own buffers: a read()
// waits for the work execute() queued before it; a write() does not overtake queued work that
// reads the bytes it overwrites; write_async() copies are ordered with execute() both ways;
// after synchronize() everything is in place. One line per broken promise, empty when kept.
std::vector<std::string> ordering_problems(Device& dev);

// The case helpers live with the self-check (backend/op_case.h).
inline std::vector<float> run_on(Device& dev, Case& c) { return run_case(dev, c); }
using ps::mismatches;

}  // namespace ps::conformance
