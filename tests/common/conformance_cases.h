#pragma once
// The op conformance cases: every op over the dtypes it takes and awkward shapes, on random data
// (tests/unit/conformance_test.cpp runs them on every device the registry opens; the GPU
// emulation tests run them on the CUDA/HIP kernels compiled for the host).
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "graph/graph.h"

namespace ps::conformance {

// One case: a graph with its leaves' bytes, the output to compare and its tolerance (relative to
// the largest magnitude of the CPU's output).
struct Case {
  std::string name;
  Graph graph;
  std::vector<std::vector<uint8_t>> leaf_bytes;
  Tensor* out = nullptr;
  DType out_type = DType::F32;  // F16 when the output is a view of an F16 cache
  double tolerance = 1e-5;
};

std::vector<std::unique_ptr<Case>> all_cases();

// Runs a case's graph on dev with every tensor in dev's memory; returns the output as floats.
std::vector<float> run_on(Device& dev, Case& c);

// The elements where got differs from want by more than the case's tolerance (at most 5),
// described for a failure message; empty when they match.
std::vector<std::string> mismatches(const Case& c, const std::vector<float>& want,
                                    const std::vector<float>& got);

}  // namespace ps::conformance
