#pragma once
// Inputs of the kernel benchmarks: normally distributed floats (mean 0, deviation 1) from a
// seed, the same on every run.
#include <cstddef>
#include <random>
#include <vector>

namespace ps::bench {

inline std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace ps::bench
