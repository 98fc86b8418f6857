// The row loops of the activations and of F32 -> F16 conversion (backends/cpu/row_ops.h) at
// every ISA level this CPU runs, against double-precision references (and f32_to_fp16, bit for
// bit), on rows whose lengths leave every possible tail, with values over the whole float range.
#include "backends/cpu/row_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"

namespace ps {
namespace {

constexpr int64_t kLengths[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 100, 5633};
constexpr float kCanary = 12345.0f;

// Normal values of a few magnitudes, with the edges of e^x's range and the specials spread
// through the row.
std::vector<float> test_values(int64_t n, uint32_t seed, bool with_specials = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> wide(-120.0f, 120.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f,   -0.0f,   inf,     -inf,    1e30f,  -1e30f,
                            87.3f,  -87.3f,  88.8f,   -88.8f,  200.0f, -200.0f,
                            1e-30f, -1e-30f, -87.34f, -87.33f, 1e-40f, -1e-40f};
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int kind = int(rng() % 4) + (with_specials ? 0 : 1);
    v[size_t(i)] = kind == 0   ? specials[rng() % std::size(specials)]
                   : kind == 1 ? wide(rng)
                               : normal(rng);
  }
  return v;
}

double silu_ref(double v) { return v / (1 + std::exp(-v)); }
double gelu_arg(double v) { return 2 * std::sqrt(2 / M_PI) * v * (1 + 0.044715 * v * v); }
double gelu_ref(double v) { return v / (1 + std::exp(-gelu_arg(v))); }

// A float result against its double reference. e^x of an argument a computed in float carries
// a relative error of about |a| ulp, so the tolerance grows with |a|; results under 1e-30 (e^x
// below the normal floats, flushed to zero) count as equal.
void expect_close(float got, double ref, double arg, const std::string& what) {
  if (std::isnan(ref)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got << ", want NaN";
    return;
  }
  if (std::isinf(ref)) {
    EXPECT_EQ(double(got), ref) << what;
    return;
  }
  const double a = std::isfinite(arg) ? std::fabs(arg) : 0.0;
  const double tol = 4e-7 * (1 + a) * std::fabs(ref) + 1e-30;
  EXPECT_NEAR(double(got), ref, tol) << what;
}

class RowOpsLevels : public ::testing::TestWithParam<IsaLevel> {
 protected:
  void SetUp() override {
    if (GetParam() != IsaLevel::Scalar && !isa_level_runs(GetParam()))
      GTEST_SKIP() << "this CPU does not run the " << isa_level_name(GetParam())
                   << " kernels (best level: " << isa_level_name(best_isa_level()) << ")";
    ops_ = &cpu::row_ops(GetParam());
  }
  const cpu::RowOps* ops_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(RowOps, RowOpsLevels,
                         ::testing::Values(IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512),
                         [](const auto& info) { return std::string(isa_level_name(info.param)); });

TEST_P(RowOpsLevels, EachLevelGetsItsOwnTable) {
  const cpu::RowOps* own = GetParam() == IsaLevel::Scalar ? cpu::row_ops_scalar()
                           : GetParam() == IsaLevel::Avx2 ? cpu::row_ops_avx2()
                                                          : cpu::row_ops_avx512();
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(ops_, own);
}

TEST_P(RowOpsLevels, SiluAndSwiGluMatchTheReference) {
  for (int64_t n : kLengths) {
    const auto x = test_values(n, uint32_t(n));
    // Gates as a model's are: finite, of moderate size.
    const auto g = test_values(n, uint32_t(n + 1000), false);
    std::vector<float> out(size_t(n) + 1, kCanary), gated(size_t(n) + 1, kCanary);
    ops_->silu(x.data(), nullptr, out.data(), n);
    ops_->silu(x.data(), g.data(), gated.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[size_t(i)], s = silu_ref(v);
      const std::string at =
          "n=" + std::to_string(n) + " i=" + std::to_string(i) + " x=" + std::to_string(v);
      expect_close(out[size_t(i)], s, v, "silu " + at);
      expect_close(gated[size_t(i)], s * double(g[size_t(i)]), v,
                   "swiglu " + at + " g=" + std::to_string(g[size_t(i)]));
    }
    EXPECT_EQ(out[size_t(n)], kCanary) << "silu wrote past the row, n=" << n;
    EXPECT_EQ(gated[size_t(n)], kCanary) << "swiglu wrote past the row, n=" << n;
  }
}

TEST_P(RowOpsLevels, GeluMatchesTheReference) {
  for (int64_t n : kLengths) {
    auto x = test_values(n, uint32_t(n + 7));
    // gelu's argument grows as v^3: keep most values where the result is not just v or 0.
    for (float& v : x)
      if (std::isfinite(v) && std::fabs(v) > 12.0f) v = std::fmod(v, 12.0f);
    std::vector<float> out(size_t(n) + 1, kCanary);
    ops_->gelu(x.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[size_t(i)];
      expect_close(
          out[size_t(i)], gelu_ref(v), gelu_arg(v),
          "gelu n=" + std::to_string(n) + " i=" + std::to_string(i) + " x=" + std::to_string(v));
    }
    EXPECT_EQ(out[size_t(n)], kCanary) << "gelu wrote past the row, n=" << n;
  }
}

// Large arguments on both sides: the result is v (or 0) without overflow on the way.
TEST_P(RowOpsLevels, ActivationsSaturateWithoutOverflow) {
  const std::vector<float> x = {1e30f, -1e30f, 1000.0f, -1000.0f, 90.0f, -90.0f, 3e38f, -3e38f};
  std::vector<float> s(x.size()), gl(x.size());
  ops_->silu(x.data(), nullptr, s.data(), int64_t(x.size()));
  ops_->gelu(x.data(), gl.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = x[i] > 0 ? x[i] : 0.0f;
    EXPECT_EQ(s[i], want) << "silu(" << x[i] << ")";
    EXPECT_EQ(gl[i], want) << "gelu(" << x[i] << ")";
  }
}

// Softmax's exponentials: out = e^(x scale - shift) with shift the maximum, and their sum, also
// in place; scores far below the maximum come out 0.
TEST_P(RowOpsLevels, ExpSumMatchesTheReference) {
  for (int64_t n : kLengths) {
    auto x = test_values(n, uint32_t(n + 11), false);
    x[size_t(n / 2)] = -1e30f;  // a score that underflows whatever the shift
    const float scale = 0.37f;
    float shift = -INFINITY;
    for (float v : x) shift = std::max(shift, v * scale);
    std::vector<float> out(size_t(n) + 1, kCanary);
    const double sum = ops_->exp_sum(x.data(), scale, shift, out.data(), n);
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double arg = double(x[size_t(i)] * scale) - double(shift);
      const double want = std::exp(arg);
      want_sum += want;
      // The argument's rounding is relative to its larger operand.
      expect_close(out[size_t(i)], want,
                   std::max(std::fabs(x[size_t(i)] * scale), std::fabs(shift)),
                   "n=" + std::to_string(n) + " i=" + std::to_string(i) +
                       " x=" + std::to_string(x[size_t(i)]));
    }
    EXPECT_EQ(out[size_t(n)], kCanary) << "wrote past the row, n=" << n;
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum) << "n=" << n;
    std::vector<float> in_place(x);
    EXPECT_EQ(ops_->exp_sum(in_place.data(), scale, shift, in_place.data(), n), sum);
    in_place.resize(size_t(n));
    out.resize(size_t(n));
    EXPECT_EQ(in_place, out) << "in place, n=" << n;
  }
}

// Squares of floats are exact in double; only the order of the additions differs.
TEST_P(RowOpsLevels, SumOfSquaresMatchesTheReference) {
  for (int64_t n : kLengths) {
    const auto x = test_values(n, uint32_t(n + 21), false);
    long double want = 0;
    for (float v : x) want += (long double)v * v;
    EXPECT_NEAR(ops_->sum_squares(x.data(), n), double(want), 1e-14 * double(want)) << "n=" << n;
  }
  const float big[3] = {1e30f, -3e38f, 2.0f};  // squares far beyond float's range
  const double want = double(big[1]) * big[1] + double(big[0]) * big[0] + 4.0;
  EXPECT_NEAR(ops_->sum_squares(big, 3), want, 1e-15 * want);
}

TEST_P(RowOpsLevels, F32ToF16IsBitExact) {
  std::mt19937 rng(99);
  for (int64_t n : kLengths) {
    // Random bit patterns cover every exponent: subnormal halves, rounding to inf, NaNs.
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) {
      const uint32_t bits = rng();
      std::memcpy(&v, &bits, 4);
    }
    const auto normal = test_values(n, uint32_t(n + 3));
    for (int64_t i = 0; i < n; i += 2) x[size_t(i)] = normal[size_t(i)];
    std::vector<uint16_t> out(size_t(n) + 1, 0xabcd);
    ops_->f32_to_f16(x.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t want = f32_to_fp16(x[size_t(i)]);
      if (std::isnan(x[size_t(i)]))
        EXPECT_TRUE((out[size_t(i)] & 0x7c00) == 0x7c00 && (out[size_t(i)] & 0x3ff) != 0)
            << "NaN at " << i << " gave " << out[size_t(i)];
      else
        EXPECT_EQ(out[size_t(i)], want) << "n=" << n << " i=" << i << " x=" << x[size_t(i)];
    }
    EXPECT_EQ(out[size_t(n)], 0xabcd) << "wrote past the row, n=" << n;
  }
}

}  // namespace
}  // namespace ps
