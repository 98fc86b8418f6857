// The 4-bit codebook types IQ4_NL, MXFP4 and IQ4_XS (core/dtype.h) on the CPU: the scale and
// index decoding against values written out by hand, the quantizers' defining properties, and
// the row dot kernels of every level this CPU runs against a double-precision dequantized
// reference. (The gguf package checks dequantization of all three and MXFP4's quantizer bit for
// bit: dtype_oracle_test.cpp; the tiles: gemm_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/vec_dot.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/fp16.h"
#include "guarded_bytes.h"

namespace ps {
namespace {

const DType kCodebookTypes[] = {DType::IQ4_NL, DType::MXFP4, DType::IQ4_XS};

TEST(CodebookTypes, AreComputableWithTheirGgufSizes) {
  EXPECT_EQ(dtype_info(DType::IQ4_NL).block_size, 32);
  EXPECT_EQ(dtype_info(DType::IQ4_NL).block_bytes, 18u);
  EXPECT_EQ(dtype_info(DType::MXFP4).block_size, 32);
  EXPECT_EQ(dtype_info(DType::MXFP4).block_bytes, 17u);
  EXPECT_EQ(dtype_info(DType::IQ4_XS).block_size, 256);
  EXPECT_EQ(dtype_info(DType::IQ4_XS).block_bytes, 136u);
  for (DType t : kCodebookTypes) EXPECT_TRUE(dtype_info(t).computable) << dtype_name(t);
}

TEST(CodebookTypes, E8m0HalfScalesArePowersOfTwo) {
  EXPECT_EQ(e8m0_half_to_f32(0), std::ldexp(1.0f, -128));  // subnormal
  EXPECT_EQ(e8m0_half_to_f32(1), std::ldexp(1.0f, -127));  // subnormal
  EXPECT_EQ(e8m0_half_to_f32(2), std::ldexp(1.0f, -126));
  EXPECT_EQ(e8m0_half_to_f32(127), 0.5f);
  EXPECT_EQ(e8m0_half_to_f32(128), 1.0f);
  EXPECT_EQ(e8m0_half_to_f32(131), 8.0f);
  EXPECT_EQ(e8m0_half_to_f32(255), std::ldexp(1.0f, 127));
}

// One block of each type written by hand: element j is the low nibble of byte j, element
// j + 16 the high one; IQ4_XS's 6-bit scale l - 32 from scales_l and scales_h.
TEST(CodebookTypes, DecodeHandWrittenBlocks) {
  BlockMXFP4 m{};
  m.e = 129;        // scale 2
  m.qs[0] = 0x97;   // element 0: index 7 (12), element 16: index 9 (-1)
  m.qs[15] = 0xf0;  // element 15: index 0 (0), element 31: index 15 (-12)
  float y[256];
  dequantize_row(DType::MXFP4, &m, y, 32);
  EXPECT_EQ(y[0], 24.0f);
  EXPECT_EQ(y[16], -2.0f);
  EXPECT_EQ(y[15], 0.0f);
  EXPECT_EQ(y[31], -24.0f);
  EXPECT_EQ(y[1], 0.0f);

  BlockIQ4_NL n{};
  n.d = f32_to_fp16(0.5f);
  n.qs[3] = 0x0f;  // element 3: 113, element 19: -127
  dequantize_row(DType::IQ4_NL, &n, y, 32);
  EXPECT_EQ(y[3], 56.5f);
  EXPECT_EQ(y[19], -63.5f);
  EXPECT_EQ(y[0], -63.5f);

  BlockIQ4_XS x{};
  x.d = f32_to_fp16(0.25f);
  // Sub-block 5: l = 0b10'0111 = 39, scale 7; sub-block 0: l = 0, scale -32.
  x.scales_l[2] = 0x70;
  x.scales_h = uint16_t(2u << 10);
  std::memset(x.qs, 0x88, sizeof(x.qs));  // every element index 8 (1)
  x.qs[16 * 5 + 2] = 0xf1;                // sub-block 5: element 2 index 1, element 18 index 15
  dequantize_row(DType::IQ4_XS, &x, y, 256);
  EXPECT_EQ(iq4_xs_scale(x, 5), 7);
  EXPECT_EQ(iq4_xs_scale(x, 0), -32);
  EXPECT_EQ(y[0], -8.0f);  // 0.25 * -32 * 1
  EXPECT_EQ(y[32 * 5 + 2], 0.25f * 7 * -104);
  EXPECT_EQ(y[32 * 5 + 18], 0.25f * 7 * 113);
  EXPECT_EQ(y[32 * 5 + 3], 0.25f * 7 * 1);
  EXPECT_EQ(y[32 * 1], -8.0f);  // sub-block 1: l = 0 too
}

std::vector<float> gaussian(int64_t n, std::mt19937& rng, bool block_scales = true) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-3.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  float scale = 1;
  for (int64_t i = 0; i < n; ++i) {
    if (block_scales && i % 32 == 0) scale = std::exp(log_scale(rng));
    v[size_t(i)] = scale * normal(rng);
  }
  return v;
}

std::vector<float> round_trip(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, int64_t(x.size())));
  quantize_row(t, x.data(), q.data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), int64_t(x.size()));
  return y;
}

double squared_error(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
  return e;
}

// MXFP4: the exponent puts the block's largest magnitude in [8, 16) scale units, and every
// element is the nearest of the 16 values at that scale (the first of equals).
TEST(CodebookTypes, Mxfp4QuantizerTakesTheNearestValueAtTheBlocksExponent) {
  std::mt19937 rng(11);
  const std::vector<float> x = gaussian(32 * 64, rng);
  std::vector<BlockMXFP4> q(64);
  quantize_row(DType::MXFP4, x.data(), q.data(), int64_t(x.size()));
  for (int b = 0; b < 64; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(b * 32 + j)]));
    const float d = e8m0_half_to_f32(q[size_t(b)].e);
    ASSERT_GE(amax / d, 8.0f) << "block " << b;
    ASSERT_LT(amax / d, 16.0f) << "block " << b;
    for (int j = 0; j < 32; ++j) {
      const float v = x[size_t(b * 32 + j)];
      const int idx = j < 16 ? q[size_t(b)].qs[j] & 0x0f : q[size_t(b)].qs[j - 16] >> 4;
      const float err = std::fabs(d * kMxfp4Values[idx] - v);
      for (int k = 0; k < 16; ++k) ASSERT_LE(err, std::fabs(d * kMxfp4Values[k] - v));
    }
  }
}

// IQ4_NL and IQ4_XS: each element is the nearest table value at its block's stored scale, and
// the fitted scales beat Q4_0's absmax scaling on the same data (IQ4_XS with 4.25 bits per
// weight against Q4_0's 4.5).
TEST(CodebookTypes, Iq4QuantizersPickNearestValuesAndBeatQ4_0) {
  std::mt19937 rng(12);
  for (bool block_scales : {true, false}) {
    const std::vector<float> x = gaussian(256 * 32, rng, block_scales);
    const double q4_0 = squared_error(x, round_trip(DType::Q4_0, x));
    for (DType t : {DType::IQ4_NL, DType::IQ4_XS}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (block_scales ? " mixed scales" : " one scale"));
      const std::vector<float> y = round_trip(t, x);
      const double err = squared_error(x, y);
      EXPECT_LT(err, q4_0 * 0.9) << "error " << err << " vs Q4_0's " << q4_0;
      // Nearest: no other table value at the element's scale is closer. The scale is y / value.
      std::vector<uint8_t> q(row_bytes(t, int64_t(x.size())));
      quantize_row(t, x.data(), q.data(), int64_t(x.size()));
      for (size_t i = 0; i < x.size(); ++i) {
        float scale;
        if (t == DType::IQ4_NL) {
          scale = fp16_to_f32(reinterpret_cast<const BlockIQ4_NL*>(q.data())[i / 32].d);
        } else {
          const auto& blk = reinterpret_cast<const BlockIQ4_XS*>(q.data())[i / 256];
          scale = fp16_to_f32(blk.d) * float(iq4_xs_scale(blk, int(i % 256 / 32)));
        }
        const float e = std::fabs(y[i] - x[i]);
        for (int8_t v : kIq4nlValues)
          ASSERT_LE(e, std::fabs(scale * float(v) - x[i]) * (1 + 1e-6f) + 1e-30f)
              << "element " << i;
      }
    }
  }
}

TEST(CodebookTypes, QuantizersSurviveZerosNanAndInfinity) {
  for (DType t : kCodebookTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    std::vector<float> x(256, 0.0f);
    std::vector<float> y = round_trip(t, x);
    for (float v : y) EXPECT_EQ(std::fabs(v), 0.0f);
    x[3] = std::numeric_limits<float>::quiet_NaN();
    x[40] = std::numeric_limits<float>::infinity();
    x[100] = 1.5f;
    y = round_trip(t, x);  // no crash, no undefined conversion (UBSan); values unspecified
    EXPECT_EQ(y.size(), x.size());
  }
}

// ---- row dot kernels ------------------------------------------------------------------

// Random block bytes with sane scales (every nibble occurs): fp16 d of mixed magnitudes;
// MXFP4 exponents over 2^-10 .. 2^4 and, in one block, the subnormal ones (e = 0, 1).
std::vector<uint8_t> raw_blocks(DType t, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> bytes(row_bytes(t, n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = uint8_t(byte(rng));
  const size_t bb = dtype_info(t).block_bytes;
  std::uniform_real_distribution<float> magnitude(0.001f, 0.5f);
  std::uniform_int_distribution<int> exponent(118, 132);
  for (size_t off = 0, b = 0; off < bytes.size(); off += bb, ++b) {
    if (t == DType::MXFP4) {
      bytes[off] = b < 2 ? uint8_t(b) : uint8_t(exponent(rng));
    } else {
      const uint16_t d = f32_to_fp16(b % 2 ? -magnitude(rng) : magnitude(rng));
      std::memcpy(&bytes[off], &d, 2);
    }
  }
  return bytes;
}

struct Reference {
  double dot = 0, scale = 0;
};

Reference reference(DType t, const std::vector<uint8_t>& w, const std::vector<uint8_t>& a,
                    int64_t n) {
  std::vector<float> wv(static_cast<size_t>(n)), av(static_cast<size_t>(n));
  dequantize_row(t, w.data(), wv.data(), n);
  dequantize_row(DType::Q8_0, a.data(), av.data(), n);
  Reference r;
  for (int64_t i = 0; i < n; ++i) {
    r.dot += double(wv[size_t(i)]) * av[size_t(i)];
    r.scale += std::fabs(double(wv[size_t(i)]) * av[size_t(i)]);
  }
  return r;
}

// A weight row of n elements: random blocks, or Gaussian values quantized.
std::vector<uint8_t> weight_row(DType t, int64_t n, bool raw, std::mt19937& rng) {
  if (raw) return raw_blocks(t, n, rng);
  std::vector<uint8_t> w(row_bytes(t, n));
  quantize_row(t, gaussian(n, rng).data(), w.data(), n);
  return w;
}

std::vector<int64_t> lengths(DType t) {
  if (block_size(t) == QK_K) return {256, 512, 768, 256 * 5, 256 * 17};
  return {32, 64, 96, 192, 32 * 7, 32 * 33, 4096 + 32};
}

TEST(CodebookDots, ScalarMatchesTheDequantizedReference) {
  std::mt19937 rng(21);
  for (DType t : kCodebookTypes) {
    const cpu::DotKernel& k = cpu::dot_kernel(t, IsaLevel::Scalar);
    ASSERT_EQ(k.act_type, DType::Q8_0);
    for (int64_t n : lengths(t))
      for (bool raw : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " n=" + std::to_string(n) +
                     (raw ? " random blocks" : " quantized floats"));
        const std::vector<uint8_t> w = weight_row(t, n, raw, rng);
        std::vector<uint8_t> a(row_bytes(DType::Q8_0, n));
        k.act_from_f32(gaussian(n, rng).data(), a.data(), n);
        const Reference ref = reference(t, w, a, n);
        EXPECT_NEAR(k.dot(n, w.data(), a.data()), ref.dot, 1e-6 * ref.scale);
      }
  }
}

class CodebookDotLevels : public ::testing::TestWithParam<IsaLevel> {
 protected:
  void SetUp() override {
    if (!isa_level_runs(GetParam()))
      GTEST_SKIP() << "this CPU does not run the " << isa_level_name(GetParam())
                   << " kernels (best level: " << isa_level_name(best_isa_level()) << ")";
  }
};

// The level's kernel as the dispatch picks it, on rows that end at a guard page: it matches the
// scalar kernel and reads only the row.
TEST_P(CodebookDotLevels, MatchScalarAndReadOnlyTheRow) {
  std::mt19937 rng(22 + int(GetParam()));
  std::printf("[ level    ] %s\n", std::string(isa_level_name(GetParam())).c_str());
  for (DType t : kCodebookTypes) {
    const cpu::DotKernel& simd = cpu::dot_kernel(t, GetParam());
    const cpu::DotKernel& scalar = cpu::dot_kernel(t, IsaLevel::Scalar);
    if (GetParam() != IsaLevel::Scalar) {
      EXPECT_NE(&simd, &scalar) << dtype_name(t);
    }
    for (int64_t n : lengths(t))
      for (bool raw : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " n=" + std::to_string(n));
        const std::vector<uint8_t> w = weight_row(t, n, raw, rng);
        std::vector<uint8_t> a(row_bytes(DType::Q8_0, n));
        const std::vector<float> x = gaussian(n, rng);
        scalar.act_from_f32(x.data(), a.data(), n);
        GuardedBytes gw(w.data(), w.size()), ga(a.data(), a.size());
        const Reference ref = reference(t, w, a, n);
        EXPECT_NEAR(simd.dot(n, gw.data(), ga.data()), scalar.dot(n, w.data(), a.data()),
                    1e-5 * ref.scale);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, CodebookDotLevels,
                         ::testing::Values(IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::AvxVnni,
                                           IsaLevel::Avx512),
                         [](const ::testing::TestParamInfo<IsaLevel>& info) {
                           return std::string(isa_level_name(info.param));
                         });

}  // namespace
}  // namespace ps
