// Packed weights of the CPU backend: the layout packed.h documents, the packed kernels against
// the scalar row dots on GGUF's layout (shapes with partial groups, odd block counts, every
// column count of a tile and more), reads confined to their group, and the cache.
#include "backends/cpu/packed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_dot.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "graph/graph.h"
#include "guarded_bytes.h"

namespace ps {
namespace {

using cpu::kPackRows;

// Q4_0 rows whose blocks span a wide range of scales.
std::vector<uint8_t> random_q4_0(int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.3f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-3.0f, 3.0f);
  std::vector<float> f(size_t(n * k));
  float scale = 1;
  for (size_t i = 0; i < f.size(); ++i) {
    if (i % 32 == 0) scale = std::exp(log_scale(rng));
    f[i] = scale * normal(rng);
  }
  const size_t row = row_bytes(DType::Q4_0, k);
  std::vector<uint8_t> w(row * size_t(n));
  for (int64_t r = 0; r < n; ++r)
    quantize_row(DType::Q4_0, f.data() + r * k, w.data() + row * size_t(r), k);
  return w;
}

std::vector<float> random_activations(int64_t m, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(m * k));
  for (float& v : x) v = normal(rng);
  return x;
}

uint8_t nibble_of(const BlockQ4_0& b, int i) { return i < 16 ? b.qs[i] & 0x0f : b.qs[i - 16] >> 4; }

TEST(PackedLayout, Q4_0GroupsHoldFourElementsOfEachRowPerLane) {
  std::mt19937 rng(1);
  ThreadPool pool(3);
  for (int64_t n : {8, 19, 64}) {
    for (int64_t k : {32, 96}) {
      const std::vector<uint8_t> w = random_q4_0(n, k, rng);
      std::vector<uint8_t> packed(w.size(), 0xAA);
      cpu::pack_rows(DType::Q4_0, w.data(), packed.data(), k, n, pool);
      const int64_t nb = k / 32;
      const auto* rows = reinterpret_cast<const BlockQ4_0*>(w.data());
      const auto* groups = reinterpret_cast<const cpu::BlockQ4_0x8*>(packed.data());
      for (int64_t g = 0; g < n / kPackRows; ++g) {
        for (int64_t b = 0; b < nb; ++b) {
          const cpu::BlockQ4_0x8& p = groups[g * nb + b];
          for (int j = 0; j < kPackRows; ++j) {
            const BlockQ4_0& src = rows[(g * kPackRows + j) * nb + b];
            ASSERT_EQ(p.d[j], src.d);
            for (int i = 0; i < 32; ++i) {
              // Element i of row j: vector (i % 16) / 4, lane j, byte i % 4; low nibble below 16.
              const uint8_t byte = p.qs[32 * ((i % 16) / 4) + 4 * j + i % 4];
              const uint8_t got = i < 16 ? byte & 0x0f : byte >> 4;
              ASSERT_EQ(got, nibble_of(src, i))
                  << "group " << g << " block " << b << " row " << j << " element " << i;
            }
          }
        }
      }
      // Rows past the last whole group are copied as they are.
      const size_t tail = size_t(n / kPackRows * kPackRows) * row_bytes(DType::Q4_0, k);
      EXPECT_EQ(0, std::memcmp(w.data() + tail, packed.data() + tail, w.size() - tail));
    }
  }
}

TEST(PackedLayout, OtherTypesHaveNone) {
  ThreadPool pool(1);
  uint8_t bytes[8 * 34] = {};
  EXPECT_THROW(cpu::pack_rows(DType::Q8_0, bytes, bytes, 32, 8, pool), BackendError);
}

class PackedLevels : public ::testing::TestWithParam<IsaLevel> {
 protected:
  void SetUp() override {
    if (best_isa_level() < GetParam()) {
      GTEST_SKIP() << "this CPU does not run the " << isa_level_name(GetParam())
                   << " kernels (best level: " << isa_level_name(best_isa_level()) << ")";
    }
    kernel_ = cpu::packed_kernel(DType::Q4_0, GetParam());
    ASSERT_NE(kernel_, nullptr);
  }
  const cpu::PackedKernel* kernel_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Packed, PackedLevels, ::testing::Values(IsaLevel::Avx2, IsaLevel::Avx512),
                         [](const auto& info) { return std::string(isa_level_name(info.param)); });

// The reference: scalar row dots of GGUF-layout rows with Q8_0 activations, which hold the same
// 8-bit values and scales as the packed kernels' activations. The two differ only by the order of
// float additions, and by s = d * sum rounded once, so within 1e-5 of the sum of |terms|.
struct Reference {
  std::vector<float> y;      // y[c * n + r]
  std::vector<double> size;  // sum of |terms| of each output
};

Reference reference(const std::vector<uint8_t>& w, const std::vector<float>& x, int64_t k,
                    int64_t n, int64_t m) {
  const cpu::DotKernel& dot = *cpu::dot_kernel_scalar(DType::Q4_0);
  const size_t wrow = row_bytes(DType::Q4_0, k), arow = row_bytes(DType::Q8_0, k);
  std::vector<uint8_t> act(arow * size_t(m));
  Reference ref{std::vector<float>(size_t(n * m)), std::vector<double>(size_t(n * m))};
  std::vector<float> wf(static_cast<size_t>(k)), af(static_cast<size_t>(k));
  for (int64_t c = 0; c < m; ++c) {
    dot.act_from_f32(x.data() + c * k, act.data() + arow * size_t(c), k);
    dequantize_row(DType::Q8_0, act.data() + arow * size_t(c), af.data(), k);
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* row = w.data() + wrow * size_t(r);
      ref.y[size_t(c * n + r)] = dot.dot(k, row, act.data() + arow * size_t(c));
      dequantize_row(DType::Q4_0, row, wf.data(), k);
      double s = 0;
      for (int64_t i = 0; i < k; ++i) {
        // |(q - 8) d| <= (|q - 8| + 8) d: the kernels add q d and -8 d separately.
        const float d = fp16_to_f32(reinterpret_cast<const BlockQ4_0*>(row)[i / 32].d);
        s += (std::fabs(double(wf[size_t(i)])) + 8.0 * std::fabs(d)) * std::fabs(af[size_t(i)]);
      }
      ref.size[size_t(c * n + r)] = s;
    }
  }
  return ref;
}

// The engine's path: a constant weight through cpu::matmul with a packed-weights cache.
std::vector<float> packed_matmul(std::vector<uint8_t>& w, std::vector<float>& x, int64_t k,
                                 int64_t n, int64_t m, IsaLevel level, int threads,
                                 cpu::PackedWeights& cache) {
  ThreadPool pool(threads);
  cpu::Context ctx;
  ctx.pool = &pool;
  ctx.isa = level;
  ctx.packed = &cache;
  Graph g;
  Tensor* wt = g.leaf("w", DType::Q4_0, {k, n, 1, 1}, w.data());
  wt->constant = true;
  Tensor* xt = g.leaf("x", DType::F32, {k, m, 1, 1}, x.data());
  Tensor* y = g.matmul(wt, xt);
  std::vector<float> out(size_t(n * m), std::nanf(""));
  y->data = out.data();
  cpu::matmul(ctx, *y);
  return out;
}

TEST_P(PackedLevels, MatmulMatchesScalarRowDots) {
  std::mt19937 rng(99 + unsigned(GetParam()));
  for (int64_t k : {32, 32 * 7, 4096 + 32}) {
    for (int64_t n : {8, 37, 131}) {
      std::vector<uint8_t> w = random_q4_0(n, k, rng);
      for (int64_t m : {1, 2, 3, 4, 5, 17}) {
        std::vector<float> x = random_activations(m, k, rng);
        const Reference ref = reference(w, x, k, n, m);
        for (int threads : {1, 3}) {
          SCOPED_TRACE("K=" + std::to_string(k) + " N=" + std::to_string(n) +
                       " M=" + std::to_string(m) + " threads " + std::to_string(threads));
          cpu::PackedWeights cache;
          const std::vector<float> got = packed_matmul(w, x, k, n, m, GetParam(), threads, cache);
          EXPECT_EQ(cache.bytes(), w.size());
          int failures = 0;
          for (size_t i = 0; i < got.size() && failures < 5; ++i) {
            const double bound = 1e-5 * ref.size[i];
            if (!(std::fabs(double(got[i]) - ref.y[i]) <= bound)) {
              ++failures;
              ADD_FAILURE() << "row " << i % size_t(n) << " column " << i / size_t(n) << ": packed "
                            << got[i] << ", row dot " << ref.y[i] << ", bound " << bound;
            }
          }
        }
      }
    }
  }
}

// Packed weights and converted activations that end at a guard page: every tile width reads
// exactly its group's blocks and its columns' blocks.
TEST_P(PackedLevels, TilesReadNothingPastTheirGroupAndColumns) {
  std::mt19937 rng(5);
  ThreadPool pool(1);
  const cpu::GemmKernel& g = kernel_->gemm;
  ASSERT_EQ(g.rows, kPackRows);
  for (int64_t k : {32, 96}) {
    std::vector<uint8_t> w = random_q4_0(kPackRows, k, rng);
    std::vector<uint8_t> packed(w.size());
    cpu::pack_rows(DType::Q4_0, w.data(), packed.data(), k, kPackRows, pool);
    GuardedBytes gw(packed.data(), packed.size());
    for (int width = 1; width <= g.cols; ++width) {
      SCOPED_TRACE("K=" + std::to_string(k) + " width " + std::to_string(width));
      std::vector<float> x = random_activations(width, k, rng);
      const size_t stride = kernel_->act_block_bytes * size_t(k / 32);
      std::vector<uint8_t> act(stride * size_t(width));
      for (int c = 0; c < width; ++c)
        kernel_->act_from_f32(x.data() + c * k, act.data() + stride * size_t(c), k);
      GuardedBytes ga(act.data(), act.size());
      std::vector<float> y(size_t(kPackRows * width));
      g.tiles[width - 1](k, gw.data(), 0, ga.data(), stride, y.data(), kPackRows);
      const Reference ref = reference(w, x, k, kPackRows, width);
      for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref.y[i], 1e-5 * ref.size[i]);
    }
  }
}

// The rows after the last whole group stay in GGUF's layout and go through tail_dot.
TEST_P(PackedLevels, TailDotMatchesTheRowDot) {
  std::mt19937 rng(6);
  for (int64_t k : {32, 32 * 5, 2048 + 96}) {
    std::vector<uint8_t> w = random_q4_0(1, k, rng);
    std::vector<float> x = random_activations(1, k, rng);
    std::vector<uint8_t> act(kernel_->act_block_bytes * size_t(k / 32));
    kernel_->act_from_f32(x.data(), act.data(), k);
    const Reference ref = reference(w, x, k, 1, 1);
    EXPECT_NEAR(kernel_->tail_dot(k, w.data(), act.data()), ref.y[0], 1e-5 * ref.size[0])
        << "K=" << k;
  }
}

// Converted activations hold Q8_0's values: d exactly the fp16 scale, s = d * sum(qs).
TEST_P(PackedLevels, ActivationsHoldQ8_0Values) {
  std::mt19937 rng(7);
  const int64_t k = 32 * 9;
  std::vector<float> x = random_activations(1, k, rng);
  x[5] = 0;  // a block with a zero, and one all zero
  for (int i = 64; i < 96; ++i) x[size_t(i)] = 0;
  std::vector<BlockQ8_0> q8(size_t(k / 32));
  cpu::dot_kernel_scalar(DType::Q4_0)->act_from_f32(x.data(), q8.data(), k);
  std::vector<cpu::BlockQ8S> qs(size_t(k / 32));
  kernel_->act_from_f32(x.data(), qs.data(), k);
  for (size_t b = 0; b < q8.size(); ++b) {
    EXPECT_EQ(qs[b].d, fp16_to_f32(q8[b].d)) << "block " << b;
    EXPECT_EQ(0, std::memcmp(qs[b].qs, q8[b].qs, 32)) << "block " << b;
    int sum = 0;
    for (int8_t v : q8[b].qs) sum += v;
    EXPECT_EQ(qs[b].s, qs[b].d * float(sum)) << "block " << b;
  }
}

TEST(PackedWeights, PacksOnceAndOnlyConstantMatrices) {
  std::mt19937 rng(8);
  ThreadPool pool(2);
  std::vector<uint8_t> w = random_q4_0(16, 64, rng);
  Graph g;
  Tensor* t = g.leaf("w", DType::Q4_0, {64, 16, 1, 1}, w.data());
  EXPECT_FALSE(cpu::can_pack(*t));  // activations or a KV cache may change
  t->constant = true;
  EXPECT_TRUE(cpu::can_pack(*t));
  cpu::PackedWeights cache;
  const void* first = cache.get(*t, pool);
  EXPECT_EQ(cache.get(*t, pool), first);
  EXPECT_EQ(cache.bytes(), w.size());

  // The same bytes seen as another shape are not silently given the first packing.
  Tensor* other = g.leaf("w2", DType::Q4_0, {32, 32, 1, 1}, w.data());
  other->constant = true;
  EXPECT_THROW(cache.get(*other, pool), BackendError);

  Tensor* few = g.leaf("few", DType::Q4_0, {64, 7, 1, 1}, w.data());
  few->constant = true;
  EXPECT_FALSE(cpu::can_pack(*few));  // no whole group
  Tensor* q8 = g.leaf("q8", DType::Q8_0, {64, 8, 1, 1}, w.data());
  q8->constant = true;
  EXPECT_FALSE(cpu::can_pack(*q8));
}

}  // namespace
}  // namespace ps
