#pragma once
// One op check: a small graph on random data with its leaves' bytes, the output to compare and
// its tolerance; run on any device and compared with the CPU backend's result. The op
// conformance suite (tests/common) and the self-check a device passes before it is trusted
// (backend/selfcheck) are both made of these.
#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "graph/graph.h"

namespace ps {

struct OpCase {
  std::string name;
  Graph graph;
  std::vector<std::vector<uint8_t>> leaf_bytes;
  Tensor* out = nullptr;
  // F16 when the output is a view of an F16 cache; I32 for indices (top_k)
  DType out_type = DType::F32;
  double tolerance = 1e-5;  // relative to the largest magnitude of the CPU's output

  // A leaf of `type` holding normal random values (quantized for types other than F32).
  Tensor* random_leaf(const std::string& leaf_name, DType type, std::array<int64_t, 4> ne,
                      std::mt19937& rng, float scale = 1.0f);
  // An I32 leaf with the given values (ids, positions).
  Tensor* int_leaf(const std::string& leaf_name, const std::vector<int32_t>& values);
  // The tolerance the conformance suite allows a matmul with weights of type t: the quantized
  // paths round activations to 8 bits; F16 and BF16 paths may round them to 16.
  static double matmul_tolerance(DType t);
};

// A case's leaves and intermediates in a device's memory, ready to run (again and again, for
// timing) and to read back.
class PreparedCase {
 public:
  PreparedCase(Device& dev, OpCase& c);
  ~PreparedCase();
  PreparedCase(const PreparedCase&) = delete;
  PreparedCase& operator=(const PreparedCase&) = delete;
  // Executes the graph and waits for it.
  void run();
  // The output as floats.
  std::vector<float> output() const;

 private:
  Device& dev_;
  OpCase& case_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<std::pair<Tensor*, void*>> host_;  // the leaves' host bytes, restored at the end
};

// Runs a case's graph on dev with every tensor in dev's memory; returns the output as floats.
std::vector<float> run_case(Device& dev, OpCase& c);

// max |got - want| / max |want|: 1 when the sizes differ, inf where got holds a NaN.
double relative_error(const std::vector<float>& want, const std::vector<float>& got);

// The elements where got differs from want by more than the case's tolerance (at most 5),
// described for a failure message; empty when they match.
std::vector<std::string> mismatches(const OpCase& c, const std::vector<float>& want,
                                    const std::vector<float>& got);

}  // namespace ps
