// Row dot kernels of the CPU backend: the scalar kernels against a double-precision
// dequantize-then-dot reference, every SIMD level against the scalar kernels, and the SIMD
// activation quantizers against the scalar ones bit for bit.
#include "backends/cpu/vec_dot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fp16.h"
#include "guarded_bytes.h"

namespace {

using ps::DType;
using ps::IsaLevel;
using ps::cpu::BlockQ8_1;
using ps::cpu::DotKernel;

const DType kQuantTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_1, DType::Q5_1};
const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};
// Whole-block lengths that leave every tail a 4-block unrolled loop can leave (nb % 4 = 0..3).
const int64_t kBlockLengths[] = {32, 64, 96, 192, 32 * 7, 32 * 33, 4096 + 32};
// Float rows of any length, around the 8/16/32/64-element steps of the SIMD loops.
const int64_t kFloatLengths[] = {1, 7, 31, 32, 33, 64, 96, 224, 1001, 1056, 4128};

bool has_offset(DType t) { return t == DType::Q4_1 || t == DType::Q5_1; }

// Weights whose blocks span a wide range of scales, with a mean offset so that Q4_1/Q5_1's m is
// never negligible.
std::vector<float> random_values(int64_t n, std::mt19937& rng, float offset) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-3.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  float scale = 1;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) scale = std::exp(log_scale(rng));
    v[size_t(i)] = offset + scale * normal(rng);
  }
  return v;
}

struct WeightRow {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantized: exactly what the bytes encode
};

WeightRow weights_from_floats(DType t, int64_t n, std::mt19937& rng) {
  const std::vector<float> src = random_values(n, rng, 0.3f);
  WeightRow row;
  row.bytes.resize(ps::row_bytes(t, n));
  row.values.resize(size_t(n));
  ps::quantize_row(t, src.data(), row.bytes.data(), n);
  ps::dequantize_row(t, row.bytes.data(), row.values.data(), n);
  return row;
}

// Uniformly random block bytes with sane scales: every nibble, fifth bit and int8 value occurs,
// including Q8_0's -128, which the reference quantizer never writes.
WeightRow raw_weights(DType t, int64_t n, std::mt19937& rng) {
  WeightRow row;
  row.bytes.resize(ps::row_bytes(t, n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : row.bytes) b = uint8_t(byte(rng));
  std::uniform_real_distribution<float> magnitude(0.001f, 0.5f);
  std::bernoulli_distribution negative(0.5);
  const auto random_half = [&] {
    return ps::f32_to_fp16(negative(rng) ? -magnitude(rng) : magnitude(rng));
  };
  const size_t block_bytes = ps::dtype_info(t).block_bytes;
  for (size_t off = 0; off < row.bytes.size(); off += block_bytes) {
    const uint16_t d = random_half();
    std::memcpy(&row.bytes[off], &d, 2);
    if (has_offset(t)) {
      const uint16_t m = random_half();
      std::memcpy(&row.bytes[off + 2], &m, 2);
    }
  }
  row.values.resize(size_t(n));
  ps::dequantize_row(t, row.bytes.data(), row.values.data(), n);
  return row;
}

struct ActRow {
  std::vector<float> source;  // the F32 activations
  std::vector<uint8_t> bytes;
};

ActRow activations(const DotKernel& k, int64_t n, std::mt19937& rng) {
  ActRow row;
  row.source = random_values(n, rng, 0.0f);
  row.bytes.resize(k.act_type == DType::F32 ? size_t(n) * 4 : ps::row_bytes(k.act_type, n));
  k.act_from_f32(row.source.data(), row.bytes.data(), n);
  return row;
}

// What the activation bytes encode, element by element (Q8_1's s aside).
std::vector<float> act_values(DType act_type, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  if (act_type == DType::Q8_1) {
    const auto* blocks = reinterpret_cast<const BlockQ8_1*>(bytes.data());
    for (int64_t i = 0; i < n; ++i)
      v[size_t(i)] = float(blocks[i / 32].qs[i % 32]) * ps::fp16_to_f32(blocks[i / 32].d);
  } else {
    ps::dequantize_row(act_type, bytes.data(), v.data(), n);
  }
  return v;
}

struct Reference {
  double dot = 0;      // sum of dequantized weight x dequantized activation, in double
  double scale = 0;    // sum of |products|: the size of any rounding in a float dot
  double s_error = 0;  // sum of |m| * |s - d * sum(q)|: Q8_1 stores its sum s in fp16
};

Reference reference_dot(DType w, const WeightRow& weights, DType act_type,
                        const std::vector<uint8_t>& act, int64_t n) {
  const std::vector<float> a = act_values(act_type, act, n);
  Reference r;
  for (int64_t i = 0; i < n; ++i) {
    const double p = double(weights.values[size_t(i)]) * a[size_t(i)];
    r.dot += p;
    r.scale += std::fabs(p);
  }
  if (has_offset(w)) {
    // The kernel computes d_w d_a sum(q_w q_a) + m s, the reference d_w d_a sum(q_w q_a) +
    // m d_a sum(q_a); the difference is m (s - d_a sum(q_a)), bounded here exactly.
    const size_t block_bytes = ps::dtype_info(w).block_bytes;
    const auto* blocks = reinterpret_cast<const BlockQ8_1*>(act.data());
    for (int64_t b = 0; b < n / 32; ++b) {
      uint16_t m_bits;
      std::memcpy(&m_bits, &weights.bytes[size_t(b) * block_bytes + 2], 2);
      const double m = ps::fp16_to_f32(m_bits);
      int32_t qsum = 0;
      for (int j = 0; j < 32; ++j) qsum += blocks[b].qs[j];
      const double exact_s = double(ps::fp16_to_f32(blocks[b].d)) * qsum;
      const double s = ps::fp16_to_f32(blocks[b].s);
      r.s_error += std::fabs(m) * std::fabs(s - exact_s);
      r.scale += std::fabs(m) * (std::fabs(s) + std::fabs(exact_s));
    }
  }
  return r;
}

std::string describe(DType t, int64_t n, const char* what) {
  return std::string(ps::dtype_name(t)) + " n=" + std::to_string(n) + " " + what;
}

std::vector<int64_t> lengths_for(DType t) {
  if (ps::block_size(t) == 1) return {std::begin(kFloatLengths), std::end(kFloatLengths)};
  return {std::begin(kBlockLengths), std::end(kBlockLengths)};
}

std::vector<DType> all_types() {
  std::vector<DType> types(std::begin(kFloatTypes), std::end(kFloatTypes));
  types.insert(types.end(), std::begin(kQuantTypes), std::end(kQuantTypes));
  return types;
}

const DotKernel& level_kernel(DType t, IsaLevel level) {
  const DotKernel* k = nullptr;
  switch (level) {
    case IsaLevel::Scalar:
      k = ps::cpu::dot_kernel_scalar(t);
      break;
    case IsaLevel::Avx2:
      k = ps::cpu::dot_kernel_avx2(t);
      break;
    case IsaLevel::AvxVnni:
      k = ps::cpu::dot_kernel_avxvnni(t);
      break;
    case IsaLevel::Avx512:
      k = ps::cpu::dot_kernel_avx512(t);
      break;
  }
  if (k == nullptr) throw std::runtime_error("no kernel for " + std::string(ps::dtype_name(t)));
  return *k;
}

TEST(VecDotScalar, MatchesDoubleDequantizedReference) {
  std::mt19937 rng(1234);
  for (DType t : all_types()) {
    const DotKernel& k = level_kernel(t, IsaLevel::Scalar);
    for (int64_t n : lengths_for(t)) {
      for (bool raw : {false, true}) {
        if (raw && ps::block_size(t) == 1) continue;
        SCOPED_TRACE(describe(t, n, raw ? "random blocks" : "quantized floats"));
        const WeightRow w = raw ? raw_weights(t, n, rng) : weights_from_floats(t, n, rng);
        const ActRow a = activations(k, n, rng);
        const Reference ref = reference_dot(t, w, k.act_type, a.bytes, n);
        const float got = k.dot(n, w.bytes.data(), a.bytes.data());
        // The scalar kernel rounds each dequantized value, each block scale and its final sum
        // once to float: a few units of 2^-24 of the product magnitudes.
        EXPECT_NEAR(got, ref.dot, 1e-6 * ref.scale + ref.s_error * (1 + 1e-3));
      }
    }
  }
}

// Against the unquantized activations, the only extra error is the activation quantization,
// which the quantizer bounds per element: |a - q d16| <= d/2 + 127 |d - d16|
// <= amax (1/254 + 2^-11), with d = amax / 127 and d16 its fp16 rounding.
TEST(VecDotScalar, MatchesFloatActivationsWithinQuantizationError) {
  std::mt19937 rng(99);
  for (DType t : kQuantTypes) {
    const DotKernel& k = level_kernel(t, IsaLevel::Scalar);
    for (int64_t n : kBlockLengths) {
      SCOPED_TRACE(describe(t, n, ""));
      const WeightRow w = weights_from_floats(t, n, rng);
      const ActRow a = activations(k, n, rng);
      const std::vector<float> dequant = act_values(k.act_type, a.bytes, n);
      double exact = 0, bound = 0;
      for (int64_t b = 0; b < n / 32; ++b) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(a.source[size_t(b * 32 + j)]));
        const double element_bound = amax * (1.0 / 254 + 1.0 / 2048) * (1 + 1e-5);
        for (int j = 0; j < 32; ++j) {
          const size_t i = size_t(b * 32 + j);
          const double err = std::fabs(double(a.source[i]) - dequant[i]);
          ASSERT_LE(err, element_bound) << "element " << i;
          exact += double(w.values[i]) * a.source[i];
          bound += std::fabs(w.values[i]) * err;
        }
      }
      const Reference ref = reference_dot(t, w, k.act_type, a.bytes, n);
      const float got = k.dot(n, w.bytes.data(), a.bytes.data());
      EXPECT_NEAR(got, exact, bound + ref.s_error * (1 + 1e-3) + 1e-6 * ref.scale);
    }
  }
}

class VecDotSimd : public ::testing::TestWithParam<IsaLevel> {
 protected:
  void SetUp() override {
    if (!ps::isa_level_runs(GetParam())) {
      GTEST_SKIP() << "this CPU does not run the " << ps::isa_level_name(GetParam())
                   << " kernels (best level: " << ps::isa_level_name(ps::best_isa_level()) << ")";
    }
  }
};

// Each SIMD lane sums at most ~130 terms in float, so its rounding stays below
// 130 * 2^-24 ~ 8e-6 of the product magnitudes; the scalar kernel's is far smaller.
TEST_P(VecDotSimd, MatchesScalar) {
  std::mt19937 rng(42 + int(GetParam()));
  for (DType t : all_types()) {
    const DotKernel& simd = level_kernel(t, GetParam());
    const DotKernel& scalar = level_kernel(t, IsaLevel::Scalar);
    ASSERT_EQ(simd.act_type, scalar.act_type);
    for (int64_t n : lengths_for(t)) {
      for (bool raw : {false, true}) {
        if (raw && ps::block_size(t) == 1) continue;
        SCOPED_TRACE(describe(t, n, raw ? "random blocks" : "quantized floats"));
        const WeightRow w = raw ? raw_weights(t, n, rng) : weights_from_floats(t, n, rng);
        const ActRow a = activations(scalar, n, rng);
        const Reference ref = reference_dot(t, w, scalar.act_type, a.bytes, n);
        const float want = scalar.dot(n, w.bytes.data(), a.bytes.data());
        const float got = simd.dot(n, w.bytes.data(), a.bytes.data());
        EXPECT_NEAR(got, want, 1e-5 * ref.scale);
      }
    }
  }
}

// Block scales at the edges of fp16 (zeros of either sign, subnormals, the smallest and largest
// normals) convert exactly as the scalar kernels convert them, however the SIMD kernels do it.
// One edge value per row, so that no larger block hides an error in the tolerance.
TEST_P(VecDotSimd, EdgeScalesMatchScalar) {
  const uint16_t kEdgeHalves[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x0200,
                                  0x0400, 0x8400, 0x7bff, 0xb555};
  std::mt19937 rng(1234);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_1, DType::Q5_1}) {
    const DotKernel& simd = level_kernel(t, GetParam());
    const DotKernel& scalar = level_kernel(t, IsaLevel::Scalar);
    for (uint16_t edge : kEdgeHalves) {
      const int64_t n = 32 * 11;
      SCOPED_TRACE(describe(t, n, "edge scale") + " bits " + std::to_string(edge));
      WeightRow w = raw_weights(t, n, rng);
      const size_t block_bytes = ps::dtype_info(t).block_bytes;
      for (size_t off = 0; off < w.bytes.size(); off += block_bytes) {
        std::memcpy(&w.bytes[off], &edge, 2);
        // The offset flips sign from block to block so that it never cancels the scaled sum.
        const uint16_t m = uint16_t(edge ^ ((off / block_bytes) % 2 ? 0x8000 : 0));
        if (has_offset(t)) std::memcpy(&w.bytes[off + 2], &m, 2);
      }
      ps::dequantize_row(t, w.bytes.data(), w.values.data(), n);
      const ActRow a = activations(scalar, n, rng);
      const Reference ref = reference_dot(t, w, scalar.act_type, a.bytes, n);
      const float want = scalar.dot(n, w.bytes.data(), a.bytes.data());
      const float got = simd.dot(n, w.bytes.data(), a.bytes.data());
      EXPECT_NEAR(got, want, 1e-5 * ref.scale);
    }
  }
}

// Attention's weighted sum of V rows for several queries at once: out[q] += sum_j p[q][j] * x_j,
// against a double-precision sum, for every float type and level, on row lengths around the
// vector steps, 1 to 19 queries (the kernels' query tiles and their remainders) and strided rows
// and outputs; nothing past n of an output row is written (sentinels), nothing past the last
// row is read (a guard page), and rows given in two calls sum to the same floats as in one.
void check_weighted_sum(IsaLevel level) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType t : kFloatTypes) {
    const DotKernel& simd = level_kernel(t, level);
    ASSERT_NE(simd.weighted_sum, nullptr);
    for (int64_t n : {1, 7, 16, 24, 33, 64, 80, 130, 256}) {
      for (int nq : {1, 2, 3, 4, 5, 8, 9, 16, 19}) {
        const int64_t rows = 1 + int64_t(rng() % 40);
        SCOPED_TRACE(describe(t, n, "weighted sum") + " queries " + std::to_string(nq) + " rows " +
                     std::to_string(rows));
        // Rows of n elements, 3 elements of padding between them, one buffer ending at a guard.
        const size_t elem = ps::row_bytes(t, 1), stride = size_t(n + 3) * elem;
        std::vector<uint8_t> x(stride * size_t(rows - 1) + size_t(n) * elem);
        std::vector<float> values(size_t(rows * n));
        for (int64_t j = 0; j < rows; ++j) {
          const WeightRow w = weights_from_floats(t, n, rng);
          std::memcpy(x.data() + size_t(j) * stride, w.bytes.data(), w.bytes.size());
          std::copy(w.values.begin(), w.values.end(), values.begin() + j * n);
        }
        ps::GuardedBytes gx(x.data(), x.size());
        const size_t p_stride = size_t(rows) + 2, out_stride = size_t(n) + 5;
        std::vector<float> p(p_stride * size_t(nq)), out0(out_stride * size_t(nq));
        for (float& v : p) v = normal(rng);
        for (float& v : out0) v = normal(rng);
        std::vector<float> got = out0, split = out0;
        simd.weighted_sum(n, rows, p.data(), p_stride, nq, gx.data(), stride, got.data(),
                          out_stride);
        const int64_t cut = rows / 3;
        simd.weighted_sum(n, cut, p.data(), p_stride, nq, gx.data(), stride, split.data(),
                          out_stride);
        simd.weighted_sum(n, rows - cut, p.data() + cut, p_stride, nq,
                          static_cast<const uint8_t*>(gx.data()) + size_t(cut) * stride, stride,
                          split.data(), out_stride);
        for (int q = 0; q < nq; ++q) {
          for (int64_t i = 0; i < n; ++i) {
            const size_t o = size_t(q) * out_stride + size_t(i);
            double want = out0[o], size = std::fabs(out0[o]);
            for (int64_t j = 0; j < rows; ++j) {
              const double term =
                  double(p[size_t(q) * p_stride + size_t(j)]) * values[size_t(j * n + i)];
              want += term;
              size += std::fabs(term);
            }
            // Sums of at most 41 float roundings.
            ASSERT_NEAR(got[o], want, 4e-6 * size) << "query " << q << " element " << i;
            ASSERT_EQ(split[o], got[o]) << "query " << q << " element " << i;
          }
          for (size_t i = size_t(n); i < out_stride; ++i)
            ASSERT_EQ(got[size_t(q) * out_stride + i], out0[size_t(q) * out_stride + i])
                << "past n: query " << q << " element " << i;
        }
      }
    }
  }
  for (DType t : kQuantTypes) EXPECT_EQ(level_kernel(t, level).weighted_sum, nullptr);
}

TEST(VecDotScalar, WeightedSumMatchesDoubleAndAccumulatesInRowOrder) {
  check_weighted_sum(IsaLevel::Scalar);
}

TEST_P(VecDotSimd, WeightedSumMatchesDoubleAndAccumulatesInRowOrder) {
  check_weighted_sum(GetParam());
}

// Rows and activations that end at a guard page: the dot kernels and the activation quantizers
// read exactly their n elements (a tail handled by a full-width load would crash here).
TEST_P(VecDotSimd, ReadsNothingPastTheRow) {
  std::mt19937 rng(7);
  for (DType t : all_types()) {
    const DotKernel& simd = level_kernel(t, GetParam());
    const DotKernel& scalar = level_kernel(t, IsaLevel::Scalar);
    const std::vector<int64_t> lengths =
        ps::block_size(t) == 1 ? std::vector<int64_t>{1, 5, 17, 47} : std::vector<int64_t>{32, 96};
    for (int64_t n : lengths) {
      SCOPED_TRACE(describe(t, n, ""));
      const WeightRow w = weights_from_floats(t, n, rng);
      const ActRow a = activations(scalar, n, rng);
      ps::GuardedBytes guarded_w(w.bytes.data(), w.bytes.size());
      ps::GuardedBytes guarded_a(a.bytes.data(), a.bytes.size());
      ps::GuardedBytes guarded_x(a.source.data(), a.source.size() * sizeof(float));
      const Reference ref = reference_dot(t, w, scalar.act_type, a.bytes, n);
      EXPECT_NEAR(simd.dot(n, guarded_w.data(), guarded_a.data()),
                  scalar.dot(n, w.bytes.data(), a.bytes.data()), 1e-5 * ref.scale);
      std::vector<uint8_t> converted(a.bytes.size());
      simd.act_from_f32(reinterpret_cast<const float*>(guarded_x.data()), converted.data(), n);
      EXPECT_EQ(converted, a.bytes);
    }
  }
}

// Activation rows with ties (x * id exactly k + 0.5) and near-ties, zero blocks, a lone value,
// fp16-subnormal scales and ordinary random blocks.
std::vector<float> awkward_activations(int64_t n, std::mt19937& rng) {
  std::vector<float> x = random_values(n, rng, 0.0f);
  const int64_t nb = n / 32;
  for (int64_t b = 0; b < nb; ++b) {
    float* blk = x.data() + b * 32;
    switch (b % 6) {
      case 0:  // amax 127 makes d = 1 and id = 1, so these are exact ties
        for (int j = 0; j < 32; ++j) blk[j] = float(j % 9) - 4.5f;
        blk[5] = 127.0f;
        blk[6] = -126.5f;
        blk[7] = std::nextafter(0.5f, 0.0f);  // just below a tie
        blk[8] = std::nextafter(-2.5f, 0.0f);
        blk[9] = std::nextafter(1.5f, 2.0f);
        break;
      case 1:
        for (int j = 0; j < 32; ++j) blk[j] = 0.0f;
        break;
      case 2:
        for (int j = 0; j < 32; ++j) blk[j] = 0.0f;
        blk[17] = -3.25f;
        break;
      case 3:  // d below the smallest normal fp16
        for (int j = 0; j < 32; ++j) blk[j] *= 1e-7f;
        break;
      default:
        break;
    }
  }
  return x;
}

TEST_P(VecDotSimd, ActivationQuantizationIsBitExact) {
  std::mt19937 rng(5);
  for (DType t : {DType::Q8_0, DType::Q4_1, DType::F16}) {
    const DotKernel& simd = level_kernel(t, GetParam());
    const DotKernel& scalar = level_kernel(t, IsaLevel::Scalar);
    for (int64_t n : kBlockLengths) {
      SCOPED_TRACE(describe(t, n, std::string(ps::dtype_name(scalar.act_type)).c_str()));
      const std::vector<float> x = awkward_activations(n, rng);
      const size_t bytes =
          scalar.act_type == DType::F32 ? size_t(n) * 4 : ps::row_bytes(scalar.act_type, n);
      std::vector<uint8_t> want(bytes, 0xAB), got(bytes, 0xCD);
      scalar.act_from_f32(x.data(), want.data(), n);
      simd.act_from_f32(x.data(), got.data(), n);
      ASSERT_EQ(got, want);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(VecDotLevels, VecDotSimd,
                         ::testing::Values(IsaLevel::Avx2, IsaLevel::AvxVnni, IsaLevel::Avx512),
                         [](const auto& info) {
                           return std::string(ps::isa_level_name(info.param));
                         });

// The ties above really are ties, and the quantizers round them away from zero like the Q8_0
// reference quantizer (and GGUF writers) do.
TEST(VecDotActivations, RoundTiesAwayFromZeroAndStoreTheSum) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 0.5f;
  x[4] = 1.25f;
  x[5] = -2.5f;
  x[6] = std::nextafter(0.5f, 0.0f);
  x[7] = std::nextafter(-1.5f, 0.0f);
  BlockQ8_1 q1{};
  ps::cpu::dot_kernel_scalar(DType::Q4_1)->act_from_f32(x.data(), &q1, 32);
  EXPECT_EQ(ps::fp16_to_f32(q1.d), 1.0f);
  EXPECT_EQ(q1.qs[0], 127);
  EXPECT_EQ(q1.qs[1], 3);
  EXPECT_EQ(q1.qs[2], -4);
  EXPECT_EQ(q1.qs[3], 1);
  EXPECT_EQ(q1.qs[4], 1);
  EXPECT_EQ(q1.qs[5], -3);
  EXPECT_EQ(q1.qs[6], 0);
  EXPECT_EQ(q1.qs[7], -1);
  EXPECT_EQ(ps::fp16_to_f32(q1.s), 127.0f + 3 - 4 + 1 + 1 - 3 + 0 - 1);
  ps::BlockQ8_0 q0{};
  ps::cpu::dot_kernel_scalar(DType::Q4_0)->act_from_f32(x.data(), &q0, 32);
  EXPECT_EQ(q0.d, q1.d);
  EXPECT_EQ(0, std::memcmp(q0.qs, q1.qs, 32));
}

// A NaN or an infinity in the activations (a model whose weights overflow) gives the Q8_1
// block the Q8_0 reference's scale and quants (an infinite scale; a NaN quant 0), never a NaN
// converted to int8 (undefined behaviour, which the sanitizer build of this test would report).
TEST(VecDotActivations, NanAndInfinityAsTheQ8_0Reference) {
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    std::vector<float> x(32, 0.25f);
    x[3] = bad;
    x[9] = -1.5f;
    BlockQ8_1 q1{};
    ps::BlockQ8_0 q0{};
    ps::cpu::dot_kernel_scalar(DType::Q4_1)->act_from_f32(x.data(), &q1, 32);
    ps::cpu::dot_kernel_scalar(DType::Q4_0)->act_from_f32(x.data(), &q0, 32);
    EXPECT_EQ(q0.d, q1.d) << bad;
    EXPECT_EQ(0, std::memcmp(q0.qs, q1.qs, 32)) << bad;
    if (std::isnan(bad))
      EXPECT_EQ(q1.qs[3], 0);  // no int8 value
    else
      EXPECT_TRUE(std::isinf(ps::fp16_to_f32(q1.d))) << bad;
  }
}

TEST(VecDotDispatch, PicksTheHighestLevelAtOrBelowTheRequest) {
  const IsaLevel best = ps::best_isa_level();
  for (DType t : all_types()) {
    SCOPED_TRACE(std::string(ps::dtype_name(t)));
    EXPECT_EQ(&ps::cpu::dot_kernel(t, IsaLevel::Scalar), ps::cpu::dot_kernel_scalar(t));
    const DotKernel* avx2 =
        best >= IsaLevel::Avx2 ? ps::cpu::dot_kernel_avx2(t) : ps::cpu::dot_kernel_scalar(t);
    EXPECT_EQ(&ps::cpu::dot_kernel(t, IsaLevel::Avx2), avx2);
    // AVX-VNNI kernels only where the CPU has AVX-VNNI.
    const DotKernel* vnni = ps::cpu_features().avx_vnni && best >= IsaLevel::Avx2
                                ? ps::cpu::dot_kernel_avxvnni(t)
                                : avx2;
    if (ps::cpu_features().avx_vnni && best >= IsaLevel::Avx2) {
      EXPECT_NE(vnni, avx2);
    }
    EXPECT_EQ(&ps::cpu::dot_kernel(t, IsaLevel::AvxVnni), vnni);
    // A request above what the CPU runs is capped instead of faulting.
    const DotKernel* top = best >= IsaLevel::Avx512 ? ps::cpu::dot_kernel_avx512(t) : vnni;
    EXPECT_EQ(&ps::cpu::dot_kernel(t, IsaLevel::Avx512), top);
    for (IsaLevel l : {IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::AvxVnni, IsaLevel::Avx512}) {
      const DType want = ps::block_size(t) == 1 ? DType::F32
                         : has_offset(t)        ? DType::Q8_1
                                                : DType::Q8_0;
      EXPECT_EQ(ps::cpu::dot_kernel(t, l).act_type, want);
    }
  }
  // The k-quants: an AVX2 kernel for each (used at the AVX-512 level too), all with Q8_K
  // activations.
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const DotKernel* simd = best >= IsaLevel::Avx2 ? ps::cpu::dot_kernel_kquants_avx2(t) : nullptr;
    EXPECT_EQ(simd != nullptr, best >= IsaLevel::Avx2) << ps::dtype_name(t);
    EXPECT_EQ(&ps::cpu::dot_kernel(t, IsaLevel::Scalar), ps::cpu::dot_kernel_scalar(t));
    for (IsaLevel l : {IsaLevel::Avx2, IsaLevel::AvxVnni, IsaLevel::Avx512})
      EXPECT_EQ(&ps::cpu::dot_kernel(t, l), simd ? simd : ps::cpu::dot_kernel_scalar(t));
    for (IsaLevel l : {IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::AvxVnni, IsaLevel::Avx512})
      EXPECT_EQ(ps::cpu::dot_kernel(t, l).act_type, DType::Q8_K);
  }
  EXPECT_THROW(ps::cpu::dot_kernel(DType::IQ2_XXS, best), ps::BackendError);
  EXPECT_THROW(ps::cpu::dot_kernel(DType::I32, IsaLevel::Scalar), ps::BackendError);
}

}  // namespace
