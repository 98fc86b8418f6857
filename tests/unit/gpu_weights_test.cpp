// The CUDA/HIP weight decoders (src/backends/cuda/weights.cuh) compiled for the host: every
// dtype's groups of 32 against the CPU backend's dequantization, bit for bit, on random rows of
// several blocks (and float rows whose length is not a whole group).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/weights.cuh"
#include "core/dtype.h"

namespace ps {
namespace {

struct DecodeRow {
  const uint8_t* row;
  int64_t n;
  std::vector<float>* out;
  template <DType T>
  void operator()() const {
    for (int64_t g = 0; 32 * g < n; ++g) gpu::decode32<T>(row, g, n, out->data() + 32 * g);
  }
};

class GpuWeights : public ::testing::TestWithParam<DType> {};

TEST_P(GpuWeights, GroupsMatchTheCpuDequantization) {
  const DType t = GetParam();
  const int64_t bs = block_size(t);
  std::mt19937 rng(uint32_t(t) * 7919u + 3);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  for (int64_t n :
       bs > 1 ? std::vector<int64_t>{bs, 3 * bs, 9 * bs} : std::vector<int64_t>{1, 37, 269}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng);
    std::vector<uint8_t> row(row_bytes(t, n));
    if (t == DType::F32)
      std::memcpy(row.data(), x.data(), row.size());
    else
      quantize_row(t, x.data(), row.data(), n);
    std::vector<float> want(static_cast<size_t>(n));
    dequantize_row(t, row.data(), want.data(), n);
    const int64_t groups = (n + 31) / 32;
    std::vector<float> got(size_t(groups * 32), -12345.0f);
    ASSERT_TRUE(gpu::with_weight_type(t, DecodeRow{row.data(), n, &got}));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(std::memcmp(&got[size_t(i)], &want[size_t(i)], 4), 0)
          << dtype_name(t) << " n=" << n << " element " << i << ": " << got[size_t(i)] << " vs "
          << want[size_t(i)];
    for (int64_t i = n; i < groups * 32; ++i) EXPECT_EQ(got[size_t(i)], 0.0f) << "past the row";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryWeightType, GpuWeights,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                                           DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                           DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                                           DType::Q6_K, DType::IQ4_NL, DType::MXFP4, DType::IQ4_XS),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

struct Never {
  template <DType T>
  void operator()() const {
    ADD_FAILURE() << "called for " << dtype_name(T);
  }
};

TEST(GpuWeights, TypesWithoutADecoderAreRefused) {
  EXPECT_FALSE(gpu::with_weight_type(DType::IQ2_XXS, Never{}));
  EXPECT_FALSE(gpu::with_weight_type(DType::I32, Never{}));
}

}  // namespace
}  // namespace ps
