// Packed weights of the CPU backend: the layout packed.h documents, the packed kernels against
// the scalar row dots on GGUF's layout (shapes with partial groups, odd block counts, every
// column count of a tile and more), reads confined to their group, and the cache.
#include "backends/cpu/packed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_dot.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/kquants.h"
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
      cpu::pack_rows(DType::Q4_0, kPackRows, w.data(), packed.data(), k, n, pool);
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

TEST(PackedLayout, Q4_0x16GroupsHoldFourElementsOfEachRowPerLane) {
  std::mt19937 rng(2);
  ThreadPool pool(2);
  const int64_t n = 37, k = 64, nb = 2;
  const std::vector<uint8_t> w = random_q4_0(n, k, rng);
  std::vector<uint8_t> packed(w.size(), 0xAA);
  cpu::pack_rows(DType::Q4_0, cpu::kPackRowsK, w.data(), packed.data(), k, n, pool);
  const auto* rows = reinterpret_cast<const BlockQ4_0*>(w.data());
  const auto* groups = reinterpret_cast<const cpu::BlockQ4_0x16*>(packed.data());
  for (int64_t g = 0; g < n / cpu::kPackRowsK; ++g)
    for (int64_t b = 0; b < nb; ++b) {
      const cpu::BlockQ4_0x16& p = groups[g * nb + b];
      for (int j = 0; j < cpu::kPackRowsK; ++j) {
        const BlockQ4_0& src = rows[(g * cpu::kPackRowsK + j) * nb + b];
        ASSERT_EQ(p.d[j], src.d);
        for (int i = 0; i < 32; ++i) {
          const uint8_t byte = p.qs[(i % 16) / 4][j][i % 4];
          ASSERT_EQ(i < 16 ? byte & 0x0f : byte >> 4, nibble_of(src, i))
              << "group " << g << " block " << b << " row " << j << " element " << i;
        }
      }
    }
  const size_t tail = size_t(n / cpu::kPackRowsK * cpu::kPackRowsK) * row_bytes(DType::Q4_0, k);
  EXPECT_EQ(0, std::memcmp(w.data() + tail, packed.data() + tail, w.size() - tail));
}

TEST(PackedLayout, OtherTypesHaveNone) {
  ThreadPool pool(1);
  uint8_t bytes[8 * 34] = {};
  EXPECT_THROW(cpu::pack_rows(DType::Q8_0, 8, bytes, bytes, 32, 8, pool), BackendError);
  EXPECT_THROW(cpu::pack_rows(DType::Q4_K, 8, bytes, bytes, 256, 8, pool), BackendError);
  EXPECT_EQ(cpu::packed_layout(DType::Q4_0, 12, 32).rows, 0);
}

class PackedLevels : public ::testing::TestWithParam<IsaLevel> {
 protected:
  void SetUp() override {
    if (!isa_level_runs(GetParam())) {
      GTEST_SKIP() << "this CPU does not run the " << isa_level_name(GetParam())
                   << " kernels (best level: " << isa_level_name(best_isa_level()) << ")";
    }
    kernel_ = cpu::packed_kernel(DType::Q4_0, GetParam());
    ASSERT_NE(kernel_, nullptr);
  }
  const cpu::PackedKernel* kernel_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Packed, PackedLevels,
                         ::testing::Values(IsaLevel::Avx2, IsaLevel::AvxVnni, IsaLevel::Avx512),
                         [](const auto& info) { return std::string(isa_level_name(info.param)); });

// Each level gets its own kernels: the AVX-VNNI ones only where the CPU has AVX-VNNI, and the
// plain AVX2 ones at the avx2 level even there.
TEST(PackedDispatch, EachLevelGetsItsOwnKernels) {
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    EXPECT_EQ(cpu::packed_kernel(t, IsaLevel::Scalar), nullptr);
    if (!isa_level_runs(IsaLevel::Avx2)) continue;
    const cpu::PackedKernel* avx2 = cpu::packed_kernel_avx2(t);
    const cpu::PackedKernel* vnni = cpu::packed_kernel_avxvnni(t);
    ASSERT_NE(avx2, nullptr);
    ASSERT_NE(vnni, nullptr);
    EXPECT_NE(avx2, vnni);
    EXPECT_EQ(cpu::packed_kernel(t, IsaLevel::Avx2), avx2);
    EXPECT_EQ(cpu::packed_kernel(t, IsaLevel::AvxVnni), cpu_features().avx_vnni ? vnni : avx2);
    EXPECT_EQ(vnni->gemm.rows, avx2->gemm.rows);  // the same packed layout
  }
}

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
                                 cpu::PackedWeights& cache, DType type = DType::Q4_0) {
  ThreadPool pool(threads);
  cpu::Context ctx;
  ctx.pool = &pool;
  ctx.isa = level;
  ctx.packed = &cache;
  Graph g;
  Tensor* wt = g.leaf("w", type, {k, n, 1, 1}, w.data());
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
          // Fewer rows than a group stay unpacked.
          EXPECT_EQ(cache.bytes(), n >= kernel_->gemm.rows ? w.size() : 0);
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

// Matmuls of one activation matrix, as a layer's q, k and v: matmul_siblings runs the ones
// whose packed kernels share an activation format as one batch (views between them skipped),
// stops at the first that does not fit, and each output equals that matmul run on its own, bit
// for bit.
TEST_P(PackedLevels, SiblingMatmulsEqualEachRunOnItsOwn) {
  const IsaLevel level = GetParam();
  std::mt19937 rng(7 + unsigned(level));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t k = 512;
  struct Weight {
    DType type;
    int64_t n;
    std::vector<uint8_t> bytes;
  };
  // Q4_K, Q5_K and Q6_K take the same Q8_K activations; Q8_0 takes others, so it ends the run.
  std::vector<Weight> weights = {{DType::Q4_K, 48, {}},
                                 {DType::Q6_K, 35, {}},  // rows past the last group of 16
                                 {DType::Q5_K, 16, {}},
                                 {DType::Q8_0, 32, {}},
                                 {DType::Q4_K, 64, {}}};
  for (Weight& w : weights) {
    std::vector<float> f(size_t(w.n * k));
    for (float& v : f) v = normal(rng);
    w.bytes.resize(row_bytes(w.type, k) * size_t(w.n));
    for (int64_t r = 0; r < w.n; ++r)
      quantize_row(w.type, f.data() + r * k, w.bytes.data() + size_t(r) * row_bytes(w.type, k), k);
  }
  // How many of the first weights share the first one's activations at this level.
  size_t expected = 1;
  const cpu::PackedKernel* first = cpu::packed_kernel(weights[0].type, level);
  ASSERT_NE(first, nullptr);
  while (expected < weights.size()) {
    const cpu::PackedKernel* pk = cpu::packed_kernel(weights[expected].type, level);
    if (pk == nullptr || pk->act_from_f32 != first->act_from_f32) break;
    ++expected;
  }
  ASSERT_EQ(expected, 3u);

  for (int64_t m : {1, 5}) {
    std::vector<float> x(size_t(k * m));
    for (float& v : x) v = normal(rng);
    for (int threads : {1, 3}) {
      SCOPED_TRACE("M=" + std::to_string(m) + " threads " + std::to_string(threads));
      ThreadPool pool(threads);
      cpu::PackedWeights cache;
      cpu::Context ctx;
      ctx.pool = &pool;
      ctx.isa = level;
      ctx.packed = &cache;
      Graph g;
      Tensor* xt = g.leaf("x", DType::F32, {k, m, 1, 1}, x.data());
      std::vector<Tensor*> nodes;
      std::vector<std::vector<float>> together(weights.size()), alone(weights.size());
      for (size_t i = 0; i < weights.size(); ++i) {
        Tensor* wt = g.leaf("w", weights[i].type, {k, weights[i].n, 1, 1}, weights[i].bytes.data());
        wt->constant = true;
        Tensor* y = g.matmul(wt, xt);
        together[i].assign(size_t(weights[i].n * m), std::nanf(""));
        y->data = together[i].data();
        nodes.push_back(y);
        if (i == 0) nodes.push_back(g.reshape(y, {weights[i].n * m, 1, 1, 1}));  // a view
      }
      // The first three matmuls and the view between them.
      EXPECT_EQ(cpu::matmul_siblings(ctx, nodes), expected + 1);
      for (size_t i = expected; i < weights.size(); ++i)
        EXPECT_TRUE(std::isnan(together[i][0])) << "matmul " << i << " ran with the batch";
      // The rest, then every matmul alone.
      EXPECT_EQ(cpu::matmul_siblings(ctx, std::span(nodes).subspan(expected + 1)), 1u);
      EXPECT_EQ(cpu::matmul_siblings(ctx, std::span(nodes).subspan(expected + 2)), 1u);
      for (size_t i = 0; i < weights.size(); ++i) {
        Tensor* y = nodes[i == 0 ? 0 : i + 1];
        alone[i].assign(together[i].size(), std::nanf(""));
        y->data = alone[i].data();
        cpu::matmul(ctx, *y);
        EXPECT_EQ(0, std::memcmp(alone[i].data(), together[i].data(), alone[i].size() * 4))
            << "matmul " << i << " (" << dtype_name(weights[i].type) << ")";
      }
      // An output that overlaps another's is never batched with it.
      nodes[2]->data = nodes[0]->data;
      EXPECT_EQ(cpu::matmul_siblings(ctx, nodes), 1u);
    }
  }
}

// Packed weights and converted activations that end at a guard page: every tile width reads
// exactly its group's blocks and its columns' blocks.
TEST_P(PackedLevels, TilesReadNothingPastTheirGroupAndColumns) {
  std::mt19937 rng(5);
  ThreadPool pool(1);
  const cpu::GemmKernel& g = kernel_->gemm;
  for (int64_t k : {32, 96}) {
    std::vector<uint8_t> w = random_q4_0(g.rows, k, rng);
    std::vector<uint8_t> packed(w.size());
    cpu::pack_rows(DType::Q4_0, g.rows, w.data(), packed.data(), k, g.rows, pool);
    GuardedBytes gw(packed.data(), packed.size());
    for (int width = 1; width <= g.cols; ++width) {
      SCOPED_TRACE("K=" + std::to_string(k) + " width " + std::to_string(width));
      std::vector<float> x = random_activations(width, k, rng);
      const size_t stride = kernel_->act_row_bytes(k);
      std::vector<uint8_t> act(stride * size_t(width));
      for (int c = 0; c < width; ++c)
        kernel_->act_from_f32(x.data() + c * k, act.data() + stride * size_t(c), k);
      GuardedBytes ga(act.data(), act.size());
      std::vector<float> y(size_t(g.rows * width));
      g.tiles[width - 1](k, gw.data(), 0, ga.data(), stride, y.data(), size_t(g.rows));
      const Reference ref = reference(w, x, k, g.rows, width);
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
    std::vector<uint8_t> act(kernel_->act_row_bytes(k));
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
  ASSERT_EQ(kernel_->act_block, 32);
  ASSERT_EQ(kernel_->act_block_bytes, 40u);
  // BlockQ8S (AVX2: d, d * sum) and BlockQ8O (AVX-512: d, -8 * sum) share d and qs.
  std::vector<cpu::BlockQ8S> qs(size_t(k / 32));
  kernel_->act_from_f32(x.data(), qs.data(), k);
  const bool offset = kernel_->gemm.rows == cpu::kPackRowsK;
  for (size_t b = 0; b < q8.size(); ++b) {
    EXPECT_EQ(qs[b].d, fp16_to_f32(q8[b].d)) << "block " << b;
    EXPECT_EQ(0, std::memcmp(qs[b].qs, q8[b].qs, 32)) << "block " << b;
    int sum = 0;
    for (int8_t v : q8[b].qs) sum += v;
    if (offset) {
      int32_t got;
      std::memcpy(&got, &qs[b].s, sizeof(got));
      EXPECT_EQ(got, -8 * sum) << "block " << b;
    } else {
      EXPECT_EQ(qs[b].s, qs[b].d * float(sum)) << "block " << b;
    }
  }
}

TEST(PackedWeights, PacksOnceAndOnlyConstantMatrices) {
  std::mt19937 rng(8);
  ThreadPool pool(2);
  std::vector<uint8_t> w = random_q4_0(16, 64, rng);
  Graph g;
  Tensor* t = g.leaf("w", DType::Q4_0, {64, 16, 1, 1}, w.data());
  EXPECT_FALSE(cpu::can_pack(*t, kPackRows));  // activations or a KV cache may change
  t->constant = true;
  EXPECT_TRUE(cpu::can_pack(*t, kPackRows));
  EXPECT_TRUE(cpu::can_pack(*t, cpu::kPackRowsK));
  cpu::PackedWeights cache;
  const void* first = cache.get(*t, kPackRows, pool);
  EXPECT_EQ(cache.get(*t, kPackRows, pool), first);
  EXPECT_EQ(cache.bytes(), w.size());
  // The same bytes in groups of 16 are a second copy.
  const void* wide = cache.get(*t, cpu::kPackRowsK, pool);
  EXPECT_NE(wide, first);
  EXPECT_EQ(cache.bytes(), 2 * w.size());

  // The same bytes seen as another shape are not silently given the first packing.
  Tensor* other = g.leaf("w2", DType::Q4_0, {32, 32, 1, 1}, w.data());
  other->constant = true;
  EXPECT_THROW(cache.get(*other, kPackRows, pool), BackendError);

  Tensor* few = g.leaf("few", DType::Q4_0, {64, 7, 1, 1}, w.data());
  few->constant = true;
  EXPECT_FALSE(cpu::can_pack(*few, kPackRows));  // no whole group
  Tensor* q8 = g.leaf("q8", DType::Q8_0, {64, 8, 1, 1}, w.data());
  q8->constant = true;
  EXPECT_FALSE(cpu::can_pack(*q8, kPackRows));
}

// ---- k-quants: Q2_Kx16 .. Q6_Kx16
// ------------------------------------------------------

// Rows of a k-quant type from data whose scale changes every 16 elements over six orders of
// magnitude, with an offset, so that every sub-block scale and min is exercised.
std::vector<uint8_t> random_kquant(DType t, int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.4f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-3.0f, 3.0f);
  std::vector<float> f(size_t(n * k));
  float scale = 1;
  for (size_t i = 0; i < f.size(); ++i) {
    if (i % 16 == 0) scale = std::exp(log_scale(rng));
    f[i] = scale * normal(rng);
  }
  const size_t row = row_bytes(t, k);
  std::vector<uint8_t> w(row * size_t(n));
  for (int64_t r = 0; r < n; ++r) quantize_row(t, f.data() + r * k, w.data() + row * size_t(r), k);
  return w;
}

void levels_of(DType t, const void* block, kquants::KLevels& L) {
  if (t == DType::Q4_K)
    kquants::levels(*static_cast<const BlockQ4_K*>(block), L);
  else if (t == DType::Q5_K)
    kquants::levels(*static_cast<const BlockQ5_K*>(block), L);
  else if (t == DType::Q2_K)
    kquants::levels(*static_cast<const BlockQ2_K*>(block), L);
  else if (t == DType::Q3_K)
    kquants::levels(*static_cast<const BlockQ3_K*>(block), L);
  else
    kquants::levels(*static_cast<const BlockQ6_K*>(block), L);
}

// Element e's stored level of row j in a packed super-block, read back by the layout packed.h
// states (Q2_K: 0..3; Q3_K: 0..7, stored + 4; Q4_K: 0..15; Q5_K: 0..31; Q6_K: 0..63, stored
// + 32).
int packed_level(DType t, const void* block, int j, int e) {
  if (t == DType::Q2_K || t == DType::Q3_K) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    if (t == DType::Q2_K)
      return (static_cast<const cpu::BlockQ2_Kx16*>(block)->qs[h][l / 4][j][l % 4] >> (2 * k)) & 3;
    const auto& p = *static_cast<const cpu::BlockQ3_Kx16*>(block);
    const int low = (p.qs[h][l / 4][j][l % 4] >> (2 * k)) & 3;
    return low | (((p.hmask[l / 4][j][l % 4] >> (4 * h + k)) & 1) << 2);
  }
  if (t == DType::Q4_K || t == DType::Q5_K) {
    // Q5_Kx16 begins with Q4_Kx16's fields.
    const auto& p = *static_cast<const cpu::BlockQ4_Kx16*>(block);
    const int pair = e / 64, high = (e % 64) / 32, u = (e % 32) / 4;
    const uint8_t byte = p.qs[pair][u][j][e % 4];
    const int nibble = high ? byte >> 4 : byte & 0x0f;
    if (t == DType::Q4_K) return nibble;
    const uint8_t bits = static_cast<const cpu::BlockQ5_Kx16*>(block)->qh[u][j][e % 4];
    return nibble | (((bits >> (2 * pair + high)) & 1) << 4);
  }
  const auto& p = *static_cast<const cpu::BlockQ6_Kx16*>(block);
  const int h = e / 128, k = (e % 128) / 32, l = e % 32;
  const uint8_t ql = p.ql[h][k % 2][l / 4][j][l % 4];
  const uint8_t qh = p.qh[h][l / 4][j][l % 4];
  return ((k < 2 ? ql : ql >> 4) & 0x0f) | (((qh >> (2 * k)) & 3) << 4);
}

TEST(PackedLayout, KQuantGroupsHoldEveryLevelScaleAndMin) {
  std::mt19937 rng(11);
  ThreadPool pool(3);
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (int64_t n : {16, 37}) {
      const int64_t k = 2 * QK_K, nb = 2;
      const std::vector<uint8_t> w = random_kquant(t, n, k, rng);
      const cpu::PackedLayout layout = cpu::packed_layout(t, cpu::kPackRowsK, k);
      ASSERT_EQ(layout.rows, cpu::kPackRowsK);
      std::vector<uint8_t> packed(layout.row_bytes * size_t(n), 0xAA);
      cpu::pack_rows(t, layout.rows, w.data(), packed.data(), k, n, pool);
      const size_t wrow = row_bytes(t, k), block = wrow / size_t(nb);
      const size_t pblock = layout.row_bytes * size_t(layout.rows) / size_t(nb);
      for (int64_t g = 0; g < n / layout.rows; ++g) {
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* p =
              packed.data() + size_t(g) * layout.rows * layout.row_bytes + size_t(b) * pblock;
          for (int j = 0; j < layout.rows; ++j) {
            SCOPED_TRACE(std::string(dtype_name(t)) + " group " + std::to_string(g) + " block " +
                         std::to_string(b) + " row " + std::to_string(j));
            const uint8_t* src = w.data() + size_t(g * layout.rows + j) * wrow + size_t(b) * block;
            kquants::KLevels L;
            levels_of(t, src, L);
            const int offset = t == DType::Q6_K ? 32 : t == DType::Q3_K ? 4 : 0;
            for (int e = 0; e < QK_K; ++e)
              ASSERT_EQ(packed_level(t, p, j, e) - offset, L.q[e]) << "element " << e;
            if (t == DType::Q4_K || t == DType::Q5_K) {
              const auto& pk = *reinterpret_cast<const cpu::BlockQ4_Kx16*>(p);
              const auto& sk = *reinterpret_cast<const BlockQ4_K*>(src);
              ASSERT_EQ(pk.d[j], sk.d);
              ASSERT_EQ(pk.dmin[j], sk.dmin);
              for (int s = 0; s < 8; ++s) {
                ASSERT_EQ(fp16_to_f32(sk.d) * pk.scales[s][j], L.scale[s]) << "scale " << s;
                ASSERT_EQ(fp16_to_f32(sk.dmin) * pk.mins[s][j], L.min[s]) << "min " << s;
              }
            } else if (t == DType::Q2_K) {
              const auto& pk = *reinterpret_cast<const cpu::BlockQ2_Kx16*>(p);
              const auto& sk = *reinterpret_cast<const BlockQ2_K*>(src);
              ASSERT_EQ(pk.d[j], sk.d);
              ASSERT_EQ(pk.dmin[j], sk.dmin);
              for (int s = 0; s < 16; ++s) {
                const uint8_t byte = pk.scales[s / 2][j][s % 2];
                ASSERT_EQ(fp16_to_f32(sk.d) * float(byte & 15), L.scale[s]) << "scale " << s;
                ASSERT_EQ(fp16_to_f32(sk.dmin) * float(byte >> 4), L.min[s]) << "min " << s;
              }
            } else if (t == DType::Q3_K) {
              const auto& pk = *reinterpret_cast<const cpu::BlockQ3_Kx16*>(p);
              const auto& sk = *reinterpret_cast<const BlockQ3_K*>(src);
              ASSERT_EQ(pk.d[j], sk.d);
              for (int s = 0; s < 16; ++s)
                ASSERT_EQ(fp16_to_f32(sk.d) * float(pk.scales[s / 2][j][s % 2]), L.scale[s])
                    << "scale " << s;
            } else {
              const auto& pk = *reinterpret_cast<const cpu::BlockQ6_Kx16*>(p);
              const auto& sk = *reinterpret_cast<const BlockQ6_K*>(src);
              ASSERT_EQ(pk.d[j], sk.d);
              for (int s = 0; s < 16; ++s) ASSERT_EQ(pk.scales[s / 2][j][s % 2], sk.scales[s]);
            }
          }
        }
      }
      // Rows past the last whole group: GGUF's bytes at their packed offsets.
      for (int64_t r = n / layout.rows * layout.rows; r < n; ++r)
        EXPECT_EQ(0, std::memcmp(w.data() + size_t(r) * wrow,
                                 packed.data() + size_t(r) * layout.row_bytes, wrow))
            << "row " << r;
    }
  }
}

struct KCase {
  DType type;
  IsaLevel level;
};

class PackedKQuants : public ::testing::TestWithParam<KCase> {
 protected:
  void SetUp() override {
    if (!isa_level_runs(GetParam().level)) {
      GTEST_SKIP() << "this CPU does not run the " << isa_level_name(GetParam().level)
                   << " kernels (best level: " << isa_level_name(best_isa_level()) << ")";
    }
    kernel_ = cpu::packed_kernel(GetParam().type, GetParam().level);
    ASSERT_NE(kernel_, nullptr);
    std::printf("[ level    ] %s packed %s kernels\n",
                std::string(isa_level_name(GetParam().level)).c_str(),
                std::string(dtype_name(GetParam().type)).c_str());
  }
  const cpu::PackedKernel* kernel_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(
    Packed, PackedKQuants,
    ::testing::Values(KCase{DType::Q2_K, IsaLevel::Avx512}, KCase{DType::Q3_K, IsaLevel::Avx512},
                      KCase{DType::Q4_K, IsaLevel::Avx512}, KCase{DType::Q5_K, IsaLevel::Avx512},
                      KCase{DType::Q6_K, IsaLevel::Avx512}, KCase{DType::Q2_K, IsaLevel::Avx2},
                      KCase{DType::Q3_K, IsaLevel::Avx2}, KCase{DType::Q4_K, IsaLevel::Avx2},
                      KCase{DType::Q5_K, IsaLevel::Avx2}, KCase{DType::Q6_K, IsaLevel::Avx2},
                      KCase{DType::Q2_K, IsaLevel::AvxVnni}, KCase{DType::Q3_K, IsaLevel::AvxVnni},
                      KCase{DType::Q4_K, IsaLevel::AvxVnni}, KCase{DType::Q5_K, IsaLevel::AvxVnni},
                      KCase{DType::Q6_K, IsaLevel::AvxVnni}),
    [](const auto& info) {
      return std::string(dtype_name(info.param.type)) + "_" + isa_level_name(info.param.level);
    });

// The scalar k-quant row dots over the same Q8_K activations. The kernels sum the same exact
// integers per super-block, so they differ by float rounding only: within 1e-5 of the sum of
// |terms|, each term counted as |scale| (|level| + 32) + |min| times |activation| since the
// stored offset and the mins come off separately.
Reference kquant_reference(DType t, const std::vector<uint8_t>& w, const std::vector<float>& x,
                           int64_t k, int64_t n, int64_t m) {
  const cpu::DotKernel& dot = *cpu::dot_kernel_kquants(t);
  const size_t wrow = row_bytes(t, k), arow = row_bytes(DType::Q8_K, k);
  const size_t block = wrow / size_t(k / QK_K);
  std::vector<uint8_t> act(arow * size_t(m));
  Reference ref{std::vector<float>(size_t(n * m)), std::vector<double>(size_t(n * m))};
  std::vector<float> af(static_cast<size_t>(k));
  for (int64_t c = 0; c < m; ++c) {
    dot.act_from_f32(x.data() + c * k, act.data() + arow * size_t(c), k);
    dequantize_row(DType::Q8_K, act.data() + arow * size_t(c), af.data(), k);
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* row = w.data() + wrow * size_t(r);
      ref.y[size_t(c * n + r)] = dot.dot(k, row, act.data() + arow * size_t(c));
      double s = 0;
      for (int64_t b = 0; b < k / QK_K; ++b) {
        kquants::KLevels L;
        levels_of(t, row + size_t(b) * block, L);
        const int size = QK_K / L.subs;
        for (int e = 0; e < QK_K; ++e) {
          const int sub = e / size;
          s += (std::fabs(double(L.scale[sub])) * (std::abs(L.q[e]) + 32) +
                std::fabs(double(L.min[sub]))) *
               std::fabs(af[size_t(b * QK_K + e)]);
        }
      }
      ref.size[size_t(c * n + r)] = s;
    }
  }
  return ref;
}

TEST_P(PackedKQuants, MatmulMatchesScalarRowDots) {
  const DType t = GetParam().type;
  std::mt19937 rng(31 + unsigned(t));
  for (int64_t k : {int64_t{QK_K}, int64_t{3 * QK_K}, int64_t{17 * QK_K}}) {
    for (int64_t n : {16, 37, 131}) {
      std::vector<uint8_t> w = random_kquant(t, n, k, rng);
      for (int64_t m : {1, 2, 3, 4, 5, 17}) {
        std::vector<float> x = random_activations(m, k, rng);
        const Reference ref = kquant_reference(t, w, x, k, n, m);
        for (int threads : {1, 3}) {
          SCOPED_TRACE("K=" + std::to_string(k) + " N=" + std::to_string(n) +
                       " M=" + std::to_string(m) + " threads " + std::to_string(threads));
          cpu::PackedWeights cache;
          const std::vector<float> got =
              packed_matmul(w, x, k, n, m, GetParam().level, threads, cache, t);
          EXPECT_EQ(cache.bytes(), cpu::packed_layout(t, cpu::kPackRowsK, k).row_bytes * size_t(n));
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

TEST_P(PackedKQuants, TilesReadNothingPastTheirGroupAndColumns) {
  const DType t = GetParam().type;
  std::mt19937 rng(37);
  ThreadPool pool(1);
  const cpu::GemmKernel& g = kernel_->gemm;
  ASSERT_EQ(g.rows, cpu::kPackRowsK);
  for (int64_t k : {int64_t{QK_K}, int64_t{2 * QK_K}}) {
    std::vector<uint8_t> w = random_kquant(t, g.rows, k, rng);
    std::vector<uint8_t> packed(cpu::packed_layout(t, g.rows, k).row_bytes * size_t(g.rows));
    cpu::pack_rows(t, g.rows, w.data(), packed.data(), k, g.rows, pool);
    GuardedBytes gw(packed.data(), packed.size());
    for (int width = 1; width <= g.cols; ++width) {
      SCOPED_TRACE("K=" + std::to_string(k) + " width " + std::to_string(width));
      std::vector<float> x = random_activations(width, k, rng);
      const size_t stride = kernel_->act_row_bytes(k);
      std::vector<uint8_t> act(stride * size_t(width));
      for (int c = 0; c < width; ++c)
        kernel_->act_from_f32(x.data() + c * k, act.data() + stride * size_t(c), k);
      GuardedBytes ga(act.data(), act.size());
      std::vector<float> y(size_t(g.rows * width));
      g.tiles[width - 1](k, gw.data(), 0, ga.data(), stride, y.data(), size_t(g.rows));
      const Reference ref = kquant_reference(t, w, x, k, g.rows, width);
      for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref.y[i], 1e-5 * ref.size[i]);
    }
  }
}

// A column's outputs do not depend on how many columns its tile takes: a tile of every width
// gives each column, bit for bit, what the one-column tile gives it (the AVX2 Q6_K tiles of
// several columns take their sums in another order than the one-column tile, over the same
// integers and with the same float operations).
TEST_P(PackedKQuants, EveryTileWidthGivesTheOneColumnTilesOutputs) {
  const DType t = GetParam().type;
  std::mt19937 rng(47);
  ThreadPool pool(1);
  const cpu::GemmKernel& g = kernel_->gemm;
  const int64_t k = 3 * QK_K;
  std::vector<uint8_t> w = random_kquant(t, g.rows, k, rng);
  std::vector<uint8_t> packed(cpu::packed_layout(t, g.rows, k).row_bytes * size_t(g.rows));
  cpu::pack_rows(t, g.rows, w.data(), packed.data(), k, g.rows, pool);
  const std::vector<float> x = random_activations(g.cols, k, rng);
  const size_t stride = kernel_->act_row_bytes(k);
  std::vector<uint8_t> act(stride * size_t(g.cols));
  for (int c = 0; c < g.cols; ++c)
    kernel_->act_from_f32(x.data() + c * k, act.data() + stride * size_t(c), k);
  std::vector<float> one(size_t(g.rows * g.cols));
  for (int c = 0; c < g.cols; ++c)
    g.tiles[0](k, packed.data(), 0, act.data() + stride * size_t(c), stride,
               one.data() + size_t(c * g.rows), size_t(g.rows));
  for (int width = 2; width <= g.cols; ++width) {
    std::vector<float> y(size_t(g.rows * width));
    g.tiles[width - 1](k, packed.data(), 0, act.data(), stride, y.data(), size_t(g.rows));
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(y[i], one[i]) << "width " << width << " column " << i / size_t(g.rows) << " row "
                              << i % size_t(g.rows);
  }
}

TEST_P(PackedKQuants, TailDotMatchesTheRowDot) {
  const DType t = GetParam().type;
  std::mt19937 rng(41);
  for (int64_t k : {int64_t{QK_K}, int64_t{5 * QK_K}}) {
    std::vector<uint8_t> w = random_kquant(t, 1, k, rng);
    std::vector<float> x = random_activations(1, k, rng);
    std::vector<uint8_t> act(kernel_->act_row_bytes(k));
    kernel_->act_from_f32(x.data(), act.data(), k);
    const Reference ref = kquant_reference(t, w, x, k, 1, 1);
    EXPECT_NEAR(kernel_->tail_dot(k, w.data(), act.data()), ref.y[0], 1e-5 * ref.size[0])
        << "K=" << k;
  }
}

// The vectorised Q8_K conversion gives the scalar quantizer's bytes exactly, on blocks with a
// zero, all zeros, a tie of magnitudes (the first one found sets the sign of d), a NaN and an
// infinity.
TEST_P(PackedKQuants, ActivationsAreTheScalarQ8KBytes) {
  std::mt19937 rng(43);
  const int64_t k = 7 * QK_K;
  std::vector<float> x = random_activations(1, k, rng);
  x[3] = 0;
  for (int i = QK_K; i < 2 * QK_K; ++i) x[size_t(i)] = 0;
  for (int i = 2 * QK_K; i < 3 * QK_K; ++i) x[size_t(i)] = 0.5f;
  x[2 * QK_K + 17] = -9.0f;
  x[2 * QK_K + 200] = 9.0f;
  x[3 * QK_K + 40] = std::nanf("");
  x[4 * QK_K + 41] = INFINITY;
  x[5 * QK_K + 7] = 1e-30f;
  std::vector<BlockQ8_K> want(size_t(k / QK_K)), got(size_t(k / QK_K));
  quantize_row(DType::Q8_K, x.data(), want.data(), k);
  std::memset(got.data(), 0x5A, got.size() * sizeof(BlockQ8_K));
  kernel_->act_from_f32(x.data(), got.data(), k);
  ASSERT_EQ(kernel_->act_row_bytes(k), got.size() * sizeof(BlockQ8_K));
  for (size_t b = 0; b < want.size(); ++b)
    EXPECT_EQ(0, std::memcmp(&want[b], &got[b], sizeof(BlockQ8_K))) << "block " << b;
}

// ---- Q5_0x16 and Q8_0x16 -------------------------------------------------------------------

std::vector<uint8_t> random_rows(DType t, int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.3f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-3.0f, 3.0f);
  std::vector<float> f(size_t(n * k));
  float scale = 1;
  for (size_t i = 0; i < f.size(); ++i) {
    if (i % 32 == 0) scale = std::exp(log_scale(rng));
    f[i] = scale * normal(rng);
  }
  const size_t row = row_bytes(t, k);
  std::vector<uint8_t> w(row * size_t(n));
  for (int64_t r = 0; r < n; ++r) quantize_row(t, f.data() + r * k, w.data() + row * size_t(r), k);
  // The quantizer keeps Q8_0 within +-127; files may hold -128, whose magnitude a signed byte
  // cannot hold: plant it, and 127, in some blocks.
  if (t == DType::Q8_0) {
    auto* blocks = reinterpret_cast<BlockQ8_0*>(w.data());
    for (size_t b = 0; b < w.size() / sizeof(BlockQ8_0); b += 3)
      for (int i = int(b % 5); i < QK8_0; i += 4) blocks[b].qs[i] = i % 8 < 4 ? -128 : 127;
  }
  return w;
}

TEST(PackedLayout, Q5_0Q8_0AndCodebookx16GroupsHoldEveryLevel) {
  std::mt19937 rng(3);
  ThreadPool pool(2);
  const int64_t n = 37, k = 96, nb = 3;
  for (DType t : {DType::Q5_0, DType::Q8_0, DType::IQ4_NL, DType::MXFP4}) {
    const std::vector<uint8_t> w = random_rows(t, n, k, rng);
    std::vector<uint8_t> packed(w.size(), 0xAA);
    cpu::pack_rows(t, cpu::kPackRowsK, w.data(), packed.data(), k, n, pool);
    const size_t wrow = row_bytes(t, k), block = wrow / size_t(nb);
    std::vector<float> want(static_cast<size_t>(k));
    for (int64_t g = 0; g < n / cpu::kPackRowsK; ++g)
      for (int j = 0; j < cpu::kPackRowsK; ++j) {
        const uint8_t* src = w.data() + size_t(g * cpu::kPackRowsK + j) * wrow;
        dequantize_row(t, src, want.data(), k);
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* p = packed.data() + size_t(g * cpu::kPackRowsK) * wrow +
                             size_t(b) * block * cpu::kPackRowsK;
          uint16_t d;
          std::memcpy(&d, src + size_t(b) * block, 2);
          for (int i = 0; i < 32; ++i) {
            float got;
            if (t == DType::Q8_0) {
              const auto& x = *reinterpret_cast<const cpu::BlockQ8_0x16*>(p);
              ASSERT_EQ(x.d[j], d);
              got = fp16_to_f32(x.d[j]) * float(x.qs[i / 4][j][i % 4]);
            } else if (t == DType::IQ4_NL || t == DType::MXFP4) {
              // Q4_0x16's order: the nibbles index the type's table.
              const bool mx = t == DType::MXFP4;
              const uint8_t(&qs)[4][cpu::kPackRowsK][4] =
                  mx ? reinterpret_cast<const cpu::BlockMXFP4x16*>(p)->qs
                     : reinterpret_cast<const cpu::BlockIQ4_NLx16*>(p)->qs;
              const uint8_t byte = qs[(i % 16) / 4][j][i % 4];
              const int nibble = i < 16 ? byte & 0x0f : byte >> 4;
              float scale;
              if (mx) {
                const uint8_t e = reinterpret_cast<const cpu::BlockMXFP4x16*>(p)->e[j];
                ASSERT_EQ(e, src[size_t(b) * block]);
                scale = e8m0_half_to_f32(e);
              } else {
                const uint16_t dd = reinterpret_cast<const cpu::BlockIQ4_NLx16*>(p)->d[j];
                ASSERT_EQ(dd, d);
                scale = fp16_to_f32(dd);
              }
              got = scale * float(mx ? kMxfp4Values[nibble] : kIq4nlValues[nibble]);
            } else {
              const auto& x = *reinterpret_cast<const cpu::BlockQ5_0x16*>(p);
              ASSERT_EQ(x.d[j], d);
              const uint8_t byte = x.qs[(i % 16) / 4][j][i % 4];
              const int nibble = i < 16 ? byte & 0x0f : byte >> 4;
              const int bit = (x.qh[j][i % 4] >> ((i % 16) / 4 + (i < 16 ? 0 : 4))) & 1;
              got = fp16_to_f32(x.d[j]) * float((nibble | bit << 4) - 16);
            }
            ASSERT_EQ(got, want[size_t(b * 32 + i)]) << dtype_name(t) << " group " << g << " block "
                                                     << b << " row " << j << " element " << i;
          }
        }
      }
    const size_t tail = size_t(n / cpu::kPackRowsK * cpu::kPackRowsK) * wrow;
    EXPECT_EQ(0, std::memcmp(w.data() + tail, packed.data() + tail, w.size() - tail));
  }
}

TEST(PackedLayout, IQ4_XSx16GroupsHoldEveryLevelAndSubBlockScale) {
  std::mt19937 rng(4);
  ThreadPool pool(2);
  const int64_t n = 37, k = 512, nb = k / QK_K;
  const std::vector<uint8_t> w = random_rows(DType::IQ4_XS, n, k, rng);
  const size_t prow = cpu::packed_layout(DType::IQ4_XS, cpu::kPackRowsK, k).row_bytes;
  std::vector<uint8_t> packed(prow * size_t(n), 0xAA);
  cpu::pack_rows(DType::IQ4_XS, cpu::kPackRowsK, w.data(), packed.data(), k, n, pool);
  const size_t wrow = row_bytes(DType::IQ4_XS, k);
  std::vector<float> want(static_cast<size_t>(k));
  for (int64_t g = 0; g < n / cpu::kPackRowsK; ++g)
    for (int j = 0; j < cpu::kPackRowsK; ++j) {
      const auto* src =
          reinterpret_cast<const BlockIQ4_XS*>(w.data() + size_t(g * cpu::kPackRowsK + j) * wrow);
      dequantize_row(DType::IQ4_XS, src, want.data(), k);
      for (int64_t b = 0; b < nb; ++b) {
        const auto& x = reinterpret_cast<const cpu::BlockIQ4_XSx16*>(
            packed.data() + size_t(g * cpu::kPackRowsK) * prow)[b];
        ASSERT_EQ(x.d[j], src[b].d);
        for (int i = 0; i < QK_K; ++i) {
          const int ib = i / 32, e = i % 32;
          ASSERT_EQ(x.scales[ib][j], iq4_xs_scale(src[b], ib));
          const uint8_t byte = x.qs[ib][(e % 16) / 4][j][e % 4];
          const int nibble = e < 16 ? byte & 0x0f : byte >> 4;
          const float got =
              fp16_to_f32(x.d[j]) * float(x.scales[ib][j]) * float(kIq4nlValues[nibble]);
          ASSERT_EQ(got, want[size_t(b * QK_K + i)])
              << "group " << g << " super-block " << b << " row " << j << " element " << i;
        }
      }
    }
  // The rows past the last whole group keep GGUF's layout, at their own offsets.
  for (int64_t r = n / cpu::kPackRowsK * cpu::kPackRowsK; r < n; ++r)
    EXPECT_EQ(0, std::memcmp(w.data() + size_t(r) * wrow, packed.data() + size_t(r) * prow, wrow));
}

// The scalar row dots over Q8_0 activations; terms counted as (|w| + c d) |a| with c the
// type's level offset, which the kernels take off separately.
Reference small_reference(DType t, const std::vector<uint8_t>& w, const std::vector<float>& x,
                          int64_t k, int64_t n, int64_t m) {
  const cpu::DotKernel& dot = *cpu::dot_kernel_scalar(t);
  const size_t wrow = row_bytes(t, k), arow = row_bytes(DType::Q8_0, k),
               block = wrow / size_t(k / 32);
  const double c = t == DType::Q5_0 ? 16 : 128;  // Q8_0 and the codebook types: 128
  std::vector<uint8_t> act(arow * size_t(m));
  Reference ref{std::vector<float>(size_t(n * m)), std::vector<double>(size_t(n * m))};
  std::vector<float> wf(static_cast<size_t>(k)), af(static_cast<size_t>(k));
  for (int64_t col = 0; col < m; ++col) {
    cpu::dot_kernel_scalar(DType::Q8_0)
        ->act_from_f32(x.data() + col * k, act.data() + arow * size_t(col), k);
    dequantize_row(DType::Q8_0, act.data() + arow * size_t(col), af.data(), k);
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* row = w.data() + wrow * size_t(r);
      ref.y[size_t(col * n + r)] = dot.dot(k, row, act.data() + arow * size_t(col));
      dequantize_row(t, row, wf.data(), k);
      double s = 0;
      for (int64_t i = 0; i < k; ++i) {
        const uint8_t* at = row + size_t(i / 32) * block;
        uint16_t d;
        std::memcpy(&d, at, 2);
        float scale = t == DType::MXFP4 ? e8m0_half_to_f32(at[0]) : fp16_to_f32(d);
        if (t == DType::IQ4_XS) {  // d (l - 32) of the element's sub-block
          const auto& x = reinterpret_cast<const BlockIQ4_XS*>(row)[i / QK_K];
          scale = fp16_to_f32(x.d) * float(iq4_xs_scale(x, int(i % QK_K / 32)));
        }
        s += (std::fabs(double(wf[size_t(i)])) + c * std::fabs(scale)) * std::fabs(af[size_t(i)]);
      }
      ref.size[size_t(col * n + r)] = s;
    }
  }
  return ref;
}

class PackedSmall : public ::testing::TestWithParam<KCase> {
 protected:
  void SetUp() override {
    if (!isa_level_runs(GetParam().level)) {
      GTEST_SKIP() << "this CPU does not run the " << isa_level_name(GetParam().level)
                   << " kernels (best level: " << isa_level_name(best_isa_level()) << ")";
    }
    kernel_ = cpu::packed_kernel(GetParam().type, GetParam().level);
    ASSERT_NE(kernel_, nullptr);
    ASSERT_EQ(kernel_->gemm.rows, cpu::kPackRowsK);
    std::printf("[ level    ] %s packed %s kernels\n",
                std::string(isa_level_name(GetParam().level)).c_str(),
                std::string(dtype_name(GetParam().type)).c_str());
  }
  const cpu::PackedKernel* kernel_ = nullptr;
};

// Q8_0 at the AVX2 levels: the Q8_0x16 groups read as two halves of 8 rows. IQ4_NL and MXFP4
// (their levels looked up in a table) and IQ4_XS (the same in super-blocks of 256) at the
// AVX-512 level only; IQ4_XS takes lengths of whole super-blocks.
INSTANTIATE_TEST_SUITE_P(
    Packed, PackedSmall,
    ::testing::Values(KCase{DType::Q5_0, IsaLevel::Avx512}, KCase{DType::Q8_0, IsaLevel::Avx512},
                      KCase{DType::Q8_0, IsaLevel::Avx2}, KCase{DType::Q8_0, IsaLevel::AvxVnni},
                      KCase{DType::IQ4_NL, IsaLevel::Avx512}, KCase{DType::MXFP4, IsaLevel::Avx512},
                      KCase{DType::IQ4_XS, IsaLevel::Avx512}),
    [](const auto& info) {
      return std::string(dtype_name(info.param.type)) + "_" + isa_level_name(info.param.level);
    });

TEST_P(PackedSmall, MatmulMatchesScalarRowDots) {
  const DType t = GetParam().type;
  std::mt19937 rng(51 + unsigned(t) + 7 * unsigned(GetParam().level));
  const bool xs = t == DType::IQ4_XS;
  for (int64_t k : {xs ? 256 : 32, xs ? 256 * 3 : 32 * 7, xs ? 2048 + 256 : 2048 + 32}) {
    for (int64_t n : {16, 37, 131}) {
      std::vector<uint8_t> w = random_rows(t, n, k, rng);
      for (int64_t m : {1, 2, 3, 8, 9, 17}) {
        std::vector<float> x = random_activations(m, k, rng);
        const Reference ref = small_reference(t, w, x, k, n, m);
        for (int threads : {1, 3}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " K=" + std::to_string(k) +
                       " N=" + std::to_string(n) + " M=" + std::to_string(m) + " threads " +
                       std::to_string(threads));
          cpu::PackedWeights cache;
          const std::vector<float> got =
              packed_matmul(w, x, k, n, m, GetParam().level, threads, cache, t);
          // Every type here but IQ4_XS (its unpacked scales) packs into its own bytes.
          EXPECT_EQ(
              cache.bytes(),
              xs ? cpu::packed_layout(t, cpu::kPackRowsK, k).row_bytes * size_t(n) : w.size());
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

TEST_P(PackedSmall, TilesReadNothingPastTheirGroupAndColumns) {
  const DType t = GetParam().type;
  std::mt19937 rng(53);
  ThreadPool pool(1);
  const cpu::GemmKernel& g = kernel_->gemm;
  const bool xs = t == DType::IQ4_XS;
  for (int64_t k : {xs ? 256 : 32, xs ? 512 : 96}) {
    std::vector<uint8_t> w = random_rows(t, g.rows, k, rng);
    std::vector<uint8_t> packed(cpu::packed_layout(t, g.rows, k).row_bytes * size_t(g.rows));
    cpu::pack_rows(t, g.rows, w.data(), packed.data(), k, g.rows, pool);
    GuardedBytes gw(packed.data(), packed.size());
    for (int width = 1; width <= g.cols; ++width) {
      SCOPED_TRACE("K=" + std::to_string(k) + " width " + std::to_string(width));
      std::vector<float> x = random_activations(width, k, rng);
      const size_t stride = kernel_->act_row_bytes(k);
      std::vector<uint8_t> act(stride * size_t(width));
      for (int c = 0; c < width; ++c)
        kernel_->act_from_f32(x.data() + c * k, act.data() + stride * size_t(c), k);
      GuardedBytes ga(act.data(), act.size());
      std::vector<float> y(size_t(g.rows * width));
      g.tiles[width - 1](k, gw.data(), 0, ga.data(), stride, y.data(), size_t(g.rows));
      const Reference ref = small_reference(t, w, x, k, g.rows, width);
      for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref.y[i], 1e-5 * ref.size[i]);
    }
  }
}

TEST_P(PackedSmall, TailDotMatchesTheRowDot) {
  const DType t = GetParam().type;
  std::mt19937 rng(57);
  const bool xs = t == DType::IQ4_XS;
  for (int64_t k : {xs ? 256 : 32, xs ? 256 * 5 : 32 * 5, xs ? 2048 + 256 : 2048 + 96}) {
    std::vector<uint8_t> w = random_rows(t, 1, k, rng);
    std::vector<float> x = random_activations(1, k, rng);
    std::vector<uint8_t> act(kernel_->act_row_bytes(k));
    kernel_->act_from_f32(x.data(), act.data(), k);
    const Reference ref = small_reference(t, w, x, k, 1, 1);
    EXPECT_NEAR(kernel_->tail_dot(k, w.data(), act.data()), ref.y[0], 1e-5 * ref.size[0])
        << "K=" << k;
  }
}

// ---- BF16x16 (AVX512_BF16) --------------------------------------------------------------------

class PackedBF16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (best_isa_level() < IsaLevel::Avx512 || !cpu_features().avx512_bf16)
      GTEST_SKIP() << "this CPU has no AVX512_BF16 (best level: "
                   << isa_level_name(best_isa_level()) << ")";
    kernel_ = cpu::packed_kernel(DType::BF16, IsaLevel::Avx512);
    ASSERT_NE(kernel_, nullptr);
    std::printf("[ level    ] avx512 + avx512_bf16 packed BF16 kernels\n");
  }
  const cpu::PackedKernel* kernel_ = nullptr;
};

std::vector<uint8_t> random_bf16(int64_t n, int64_t k, std::mt19937& rng) {
  const std::vector<float> f = random_activations(n, k, rng);
  std::vector<uint8_t> w(row_bytes(DType::BF16, k) * size_t(n));
  quantize_row(DType::BF16, f.data(), w.data(), n * k);
  return w;
}

// The reference: each activation rounded to BF16 (to nearest even), products summed in double.
// Products of two BF16 values are exact in float, so the kernels differ by float additions
// only: within 1e-5 of the sum of |terms|. Against the unrounded activations, within 2^-8.
struct BF16Reference {
  Reference rounded;
  std::vector<double> exact;
};

BF16Reference bf16_reference(const std::vector<uint8_t>& w, const std::vector<float>& x, int64_t k,
                             int64_t n, int64_t m) {
  BF16Reference ref{{std::vector<float>(size_t(n * m)), std::vector<double>(size_t(n * m))},
                    std::vector<double>(size_t(n * m))};
  std::vector<float> wf(size_t(n * k)), ab(static_cast<size_t>(k));
  dequantize_row(DType::BF16, w.data(), wf.data(), n * k);
  std::vector<uint8_t> bytes(row_bytes(DType::BF16, k));
  for (int64_t c = 0; c < m; ++c) {
    quantize_row(DType::BF16, x.data() + c * k, bytes.data(), k);  // round to nearest even
    dequantize_row(DType::BF16, bytes.data(), ab.data(), k);
    for (int64_t r = 0; r < n; ++r) {
      double s = 0, size = 0, exact = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double wv = wf[size_t(r * k + i)];
        s += wv * ab[size_t(i)];
        size += std::fabs(wv * ab[size_t(i)]);
        exact += wv * x[size_t(c * k + i)];
      }
      ref.rounded.y[size_t(c * n + r)] = float(s);
      ref.rounded.size[size_t(c * n + r)] = size;
      ref.exact[size_t(c * n + r)] = exact;
    }
  }
  return ref;
}

TEST(PackedLayout, BF16x16GroupsHoldPairsOfEachRowPerLane) {
  std::mt19937 rng(4);
  ThreadPool pool(2);
  const int64_t n = 37, k = 10;
  const std::vector<uint8_t> w = random_bf16(n, k, rng);
  std::vector<uint8_t> packed(w.size(), 0xAA);
  cpu::pack_rows(DType::BF16, cpu::kPackRowsK, w.data(), packed.data(), k, n, pool);
  const auto* rows = reinterpret_cast<const uint16_t*>(w.data());
  const auto* p = reinterpret_cast<const uint16_t*>(packed.data());
  for (int64_t g = 0; g < n / cpu::kPackRowsK; ++g)
    for (int j = 0; j < cpu::kPackRowsK; ++j)
      for (int64_t e = 0; e < k; ++e)
        ASSERT_EQ(
            p[size_t(g * cpu::kPackRowsK * k + (e / 2) * 2 * cpu::kPackRowsK + 2 * j + e % 2)],
            rows[size_t((g * cpu::kPackRowsK + j) * k + e)])
            << "group " << g << " row " << j << " element " << e;
  const size_t tail = size_t(n / cpu::kPackRowsK * cpu::kPackRowsK) * row_bytes(DType::BF16, k);
  EXPECT_EQ(0, std::memcmp(w.data() + tail, packed.data() + tail, w.size() - tail));
  EXPECT_EQ(cpu::packed_layout(DType::BF16, cpu::kPackRowsK, 7).rows, 0);  // odd rows
}

TEST_F(PackedBF16, MatmulMatchesBF16RoundedActivations) {
  std::mt19937 rng(61);
  for (int64_t k : {2, 30, 64, 2048 + 34}) {
    for (int64_t n : {16, 37, 131}) {
      std::vector<uint8_t> w = random_bf16(n, k, rng);
      for (int64_t m : {1, 2, 3, 8, 9, 17}) {
        std::vector<float> x = random_activations(m, k, rng);
        const BF16Reference ref = bf16_reference(w, x, k, n, m);
        for (int threads : {1, 3}) {
          SCOPED_TRACE("K=" + std::to_string(k) + " N=" + std::to_string(n) +
                       " M=" + std::to_string(m) + " threads " + std::to_string(threads));
          cpu::PackedWeights cache;
          const std::vector<float> got =
              packed_matmul(w, x, k, n, m, IsaLevel::Avx512, threads, cache, DType::BF16);
          EXPECT_EQ(cache.bytes(), w.size());
          int failures = 0;
          for (size_t i = 0; i < got.size() && failures < 5; ++i) {
            const double bound = 1e-5 * ref.rounded.size[i];
            const double loose = std::ldexp(1.0, -8) * ref.rounded.size[i];
            if (!(std::fabs(double(got[i]) - ref.rounded.y[i]) <= bound) ||
                !(std::fabs(double(got[i]) - ref.exact[i]) <= loose)) {
              ++failures;
              ADD_FAILURE() << "row " << i % size_t(n) << " column " << i / size_t(n) << ": packed "
                            << got[i] << ", rounded " << ref.rounded.y[i] << ", exact "
                            << ref.exact[i] << ", bound " << bound;
            }
          }
        }
      }
    }
  }
}

TEST_F(PackedBF16, TilesReadNothingPastTheirGroupAndColumns) {
  std::mt19937 rng(63);
  ThreadPool pool(1);
  const cpu::GemmKernel& g = kernel_->gemm;
  for (int64_t k : {2, 34}) {
    std::vector<uint8_t> w = random_bf16(g.rows, k, rng);
    std::vector<uint8_t> packed(w.size());
    cpu::pack_rows(DType::BF16, g.rows, w.data(), packed.data(), k, g.rows, pool);
    GuardedBytes gw(packed.data(), packed.size());
    for (int width = 1; width <= g.cols; ++width) {
      SCOPED_TRACE("K=" + std::to_string(k) + " width " + std::to_string(width));
      std::vector<float> x = random_activations(width, k, rng);
      const size_t stride = kernel_->act_row_bytes(k);
      std::vector<uint8_t> act(stride * size_t(width));
      for (int c = 0; c < width; ++c)
        kernel_->act_from_f32(x.data() + c * k, act.data() + stride * size_t(c), k);
      GuardedBytes ga(act.data(), act.size());
      std::vector<float> y(size_t(g.rows * width));
      g.tiles[width - 1](k, gw.data(), 0, ga.data(), stride, y.data(), size_t(g.rows));
      const BF16Reference ref = bf16_reference(w, x, k, g.rows, width);
      for (size_t i = 0; i < y.size(); ++i)
        EXPECT_NEAR(y[i], ref.rounded.y[i], 1e-5 * ref.rounded.size[i]);
    }
  }
}

TEST_F(PackedBF16, TailDotAndActivationsMatchTheReference) {
  std::mt19937 rng(67);
  for (int64_t k : {2, 30, 66, 2048 + 2}) {
    std::vector<uint8_t> w = random_bf16(1, k, rng);
    std::vector<float> x = random_activations(1, k, rng);
    std::vector<uint8_t> act(kernel_->act_row_bytes(k)), want(row_bytes(DType::BF16, k));
    kernel_->act_from_f32(x.data(), act.data(), k);
    quantize_row(DType::BF16, x.data(), want.data(), k);
    ASSERT_EQ(act.size(), want.size());
    EXPECT_EQ(0, std::memcmp(act.data(), want.data(), act.size())) << "K=" << k;
    const BF16Reference ref = bf16_reference(w, x, k, 1, 1);
    EXPECT_NEAR(kernel_->tail_dot(k, w.data(), act.data()), ref.rounded.y[0],
                1e-5 * ref.rounded.size[0])
        << "K=" << k;
  }
}

}  // namespace
}  // namespace ps
