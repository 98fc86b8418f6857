// k-quant quantizers: what quantize -> dequantize loses, per type, on data of several shapes.
// (Dequantization is checked bit for bit against the gguf package in dtype_oracle_test.cpp;
// the quantizers follow llama.cpp's reference ones, which the package does not provide.)
#include "core/kquants.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/vec_dot.h"
#include "core/dtype.h"

namespace ps {
namespace {

// Rows of `blocks` super-blocks drawn from one of several distributions: Gaussian, offset
// uniform (all positive), log-uniform magnitudes, small values with outliers, and rows where
// every third super-block, from the second on, is zero.
std::vector<float> sample(int dist, int blocks, std::mt19937& rng) {
  std::vector<float> x(size_t(blocks) * QK_K);
  std::normal_distribution<float> nd(0, 1);
  std::uniform_real_distribution<float> ud(-1, 1);
  for (size_t i = 0; i < x.size(); ++i) {
    switch (dist) {
      case 0:
        x[i] = nd(rng);
        break;
      case 1:
        x[i] = ud(rng) + 1.5f;
        break;
      case 2:
        x[i] = nd(rng) * std::pow(10.f, 2 * ud(rng));
        break;
      case 3:
        x[i] = i % 53 == 0 ? 30.f : 0.05f * nd(rng);
        break;
      default:
        x[i] = (i / QK_K) % 3 == 1 ? 0.f : nd(rng);
        break;
    }
  }
  return x;
}

double relative_rmse(DType t, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(row_bytes(t, n), 0xA5);
  std::vector<float> y(x.size());
  quantize_row(t, x.data(), q.data(), n);
  dequantize_row(t, q.data(), y.data(), n);
  double se = 0, sx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    se += double(x[i] - y[i]) * (x[i] - y[i]);
    sx += double(x[i]) * x[i];
    if (x[i] == 0.f && (i / QK_K) % 3 == 1) {
      EXPECT_EQ(y[i], 0.f) << dtype_name(t) << ": a zero super-block";
    }
  }
  return std::sqrt(se / sx);
}

TEST(KQuants, RoundTripErrorShrinksWithEveryBitAndStaysWithinTheFormatsBound) {
  // Bounds on the relative RMS error: a uniform b-bit grid over a sub-block's range loses about
  // range / (2^b - 1) / sqrt(12); the 6-bit scales and mins and one super-block scale add to it.
  const struct {
    DType type;
    double bound;
  } types[] = {{DType::Q2_K, 0.6},   {DType::Q3_K, 0.22},  {DType::Q4_K, 0.12},
               {DType::Q5_K, 0.065}, {DType::Q6_K, 0.035}, {DType::Q8_K, 0.02}};
  std::mt19937 rng(11);
  for (int dist = 0; dist < 5; ++dist) {
    for (int blocks : {1, 3, 7}) {
      const std::vector<float> x = sample(dist, blocks, rng);
      double previous = 1e9;
      for (const auto& t : types) {
        const double e = relative_rmse(t.type, x);
        EXPECT_LE(e, t.bound) << dtype_name(t.type) << " dist " << dist << " blocks " << blocks;
        EXPECT_GT(e, 0.0) << dtype_name(t.type);
        // Each extra bit of the weight types must help, except with outliers (dist 3), where the
        // sub-block scales, not the bits per weight, limit Q4_K and Q5_K alike. Q8_K (one
        // scale per 256, for activations) is not compared: an outlier takes all its range.
        if (t.type != DType::Q8_K && dist != 3) {
          EXPECT_LT(e, previous) << dtype_name(t.type) << " is no better than the type before"
                                 << " it, dist " << dist << " blocks " << blocks;
          previous = e;
        }
      }
    }
  }
}

TEST(KQuants, Q8KKeepsTheSumsOfEach16) {
  std::mt19937 rng(5);
  const std::vector<float> x = sample(0, 3, rng);
  std::vector<BlockQ8_K> q(3);
  quantize_row(DType::Q8_K, x.data(), q.data(), int64_t(x.size()));
  for (const BlockQ8_K& b : q)
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b.qs[16 * j + l];
      EXPECT_EQ(b.bsums[j], sum);
    }
}

// The CPU's k-quant dot products against the same sum over dequantized weights and
// dequantized Q8_K activations in double: only the float rounding of the scale products may
// differ. And against the unquantized activations, within what Q8_K loses.
TEST(KQuants, CpuDotProductsMatchDequantizedWeights) {
  std::mt19937 rng(17);
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const cpu::DotKernel& k = cpu::dot_kernel(t, IsaLevel::Scalar);
    ASSERT_EQ(k.act_type, DType::Q8_K);
    for (int blocks : {1, 3, 5}) {
      const int64_t n = int64_t(blocks) * QK_K;
      const std::vector<float> w = sample(2, blocks, rng), x = sample(0, blocks, rng);
      std::vector<uint8_t> wq(row_bytes(t, n)), xq(row_bytes(DType::Q8_K, n));
      quantize_row(t, w.data(), wq.data(), n);
      k.act_from_f32(x.data(), xq.data(), n);
      std::vector<float> wd(w.size()), xd(x.size());
      dequantize_row(t, wq.data(), wd.data(), n);
      dequantize_row(DType::Q8_K, xq.data(), xd.data(), n);
      double want = 0, exact = 0, scale = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        want += double(wd[i]) * xd[i];
        exact += double(wd[i]) * x[i];
        scale += std::fabs(double(wd[i]) * x[i]);
      }
      const double got = k.dot(n, wq.data(), xq.data());
      EXPECT_NEAR(got, want, 1e-5 * scale) << dtype_name(t) << " blocks " << blocks;
      EXPECT_NEAR(got, exact, 1e-2 * scale) << dtype_name(t) << " blocks " << blocks;
    }
  }
}

// The SIMD k-quant kernels against the scalar ones on the same quantized rows (odd numbers of
// super-blocks, data of every shape above); skipped below AVX2.
TEST(KQuants, SimdDotProductsMatchScalar) {
  if (best_isa_level() < IsaLevel::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(23);
  int checked = 0;
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const cpu::DotKernel& simd = cpu::dot_kernel(t, IsaLevel::Avx2);
    const cpu::DotKernel& scalar = cpu::dot_kernel(t, IsaLevel::Scalar);
    if (&simd == &scalar) continue;
    ++checked;
    for (int dist = 0; dist < 5; ++dist)
      for (int blocks : {1, 3, 7}) {
        const int64_t n = int64_t(blocks) * QK_K;
        const std::vector<float> w = sample(dist, blocks, rng), x = sample(0, blocks, rng);
        std::vector<uint8_t> wq(row_bytes(t, n)), xq(row_bytes(DType::Q8_K, n));
        quantize_row(t, w.data(), wq.data(), n);
        scalar.act_from_f32(x.data(), xq.data(), n);
        double scale = 0;
        std::vector<float> wd(w.size());
        dequantize_row(t, wq.data(), wd.data(), n);
        for (size_t i = 0; i < w.size(); ++i) scale += std::fabs(double(wd[i]) * x[i]);
        EXPECT_NEAR(simd.dot(n, wq.data(), xq.data()), scalar.dot(n, wq.data(), xq.data()),
                    1e-5 * scale + 1e-30)
            << dtype_name(t) << " dist " << dist << " blocks " << blocks;
      }
  }
  EXPECT_EQ(checked, 5) << "every k-quant has an AVX2 kernel";
}

// The 32-bit unpacking of Q4_K / Q5_K scales and mins agrees with the per-index one on every
// bit pattern of random 12-byte fields.
TEST(KQuants, ScaleAndMinUnpackingAgree) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 1000; ++trial) {
    uint8_t packed[12], all[16];
    for (uint8_t& b : packed) b = uint8_t(byte(rng));
    kquants::unpack_k4_scales_mins(packed, all);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      kquants::get_scale_min_k4(j, packed, &sc, &m);
      ASSERT_EQ(all[j], sc) << "scale " << j;
      ASSERT_EQ(all[8 + j], m) << "min " << j;
    }
  }
}

TEST(Quantizers, TakeAnyFloatWithoutUndefinedBehaviour) {
  // A file's weights (polystack quantize) or a model's activations can hold NaN, infinities,
  // subnormals and huge values; a plain float-to-int cast of them is undefined (UBSan in the
  // sanitizer build checks every quantizer here). Blocks of small finite values stay finite.
  const float specials[] = {std::nanf(""), INFINITY, -INFINITY, 1e-45f, -1e-40f, 3.4e38f, -0.0f};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> ud(-1, 1);
  for (DType t :
       {DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
        DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K}) {
    const int64_t n = 2 * QK_K;
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < QK_K; ++i)  // the first super-block: specials among random values
      x[size_t(i)] = rng() % 3 ? ud(rng) : specials[rng() % std::size(specials)];
    for (int64_t i = QK_K; i < n; ++i)  // the second: subnormals only
      x[size_t(i)] = (i % 2 ? 1.0f : -1.0f) * 1e-42f * float(1 + i % 7);
    std::vector<uint8_t> q(row_bytes(t, n));
    std::vector<float> y(static_cast<size_t>(n));
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    for (int64_t i = QK_K; i < n; ++i)
      ASSERT_TRUE(std::isfinite(y[size_t(i)]) && std::fabs(y[size_t(i)]) < 1e-3f)
          << dtype_name(t) << " element " << i << " = " << y[size_t(i)];
  }
}

}  // namespace
}  // namespace ps
