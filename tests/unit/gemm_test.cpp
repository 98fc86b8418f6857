// The register-tiled matmul of the CPU backend (prompt processing) against the row-dot matmul
// (decode), for every weight type, at every ISA level this CPU runs, with 1 and 3 threads, on
// shapes whose rows, columns and lengths leave partial tiles, blocks and vectors everywhere.
// Both paths see the same converted activations, so they may differ only by the order of the
// float additions.
#include "backends/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_dot.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/fp16.h"
#include "core/kquants.h"
#include "core/thread_pool.h"
#include "graph/graph.h"
#include "guarded_bytes.h"
#include "scheduler/scheduler.h"

namespace ps {
namespace {

using cpu::BlockQ8_1;
using cpu::DotKernel;
using cpu::GemmKernel;

const DType kWeightTypes[] = {DType::F32,  DType::F16,    DType::BF16,  DType::Q8_0,
                              DType::Q4_0, DType::Q4_1,   DType::Q5_0,  DType::Q5_1,
                              DType::Q2_K, DType::Q3_K,   DType::Q4_K,  DType::Q5_K,
                              DType::Q6_K, DType::IQ4_NL, DType::MXFP4, DType::IQ4_XS};
const int64_t kRows[] = {37, 64, 131};
const int64_t kColumns[] = {2, 3, 5, 17, 64};

// Row lengths: odd numbers of blocks (of 32, or of 256 for the k-quants), and a long row.
std::vector<int64_t> lengths_for(DType t) {
  if (block_size(t) == 1) return {83, 1001};
  if (block_size(t) == QK_K) return {QK_K * 3, 4096 + QK_K};
  return {32 * 7, 4096 + 32};
}

// |scale * level| + |min| of each element of a k-quant row: what the kernels' terms add up to
// per unit of activation.
std::vector<float> kquant_magnitudes(DType t, const uint8_t* row, int64_t k) {
  std::vector<float> out(static_cast<size_t>(k));
  kquants::KLevels L;
  const size_t bytes = dtype_info(t).block_bytes;
  for (int64_t b = 0; b < k / QK_K; ++b) {
    const uint8_t* blk = row + size_t(b) * bytes;
    switch (t) {
      case DType::Q2_K:
        kquants::levels(*reinterpret_cast<const BlockQ2_K*>(blk), L);
        break;
      case DType::Q3_K:
        kquants::levels(*reinterpret_cast<const BlockQ3_K*>(blk), L);
        break;
      case DType::Q4_K:
        kquants::levels(*reinterpret_cast<const BlockQ4_K*>(blk), L);
        break;
      case DType::Q5_K:
        kquants::levels(*reinterpret_cast<const BlockQ5_K*>(blk), L);
        break;
      default:
        kquants::levels(*reinterpret_cast<const BlockQ6_K*>(blk), L);
        break;
    }
    const int size = QK_K / L.subs;
    for (int i = 0; i < QK_K; ++i)
      out[size_t(b * QK_K + i)] =
          std::fabs(L.scale[i / size] * float(L.q[i])) + std::fabs(L.min[i / size]);
  }
  return out;
}

bool has_min(DType t) { return t == DType::Q4_1 || t == DType::Q5_1; }

// Rows whose blocks span a wide range of scales, with a mean offset so that Q4_1/Q5_1's m
// matters.
std::vector<float> random_matrix(int64_t rows, int64_t k, std::mt19937& rng, float offset) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-3.0f, 3.0f);
  std::vector<float> v(size_t(rows * k));
  float scale = 1;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i % 32 == 0) scale = std::exp(log_scale(rng));
    v[i] = offset + scale * normal(rng);
  }
  return v;
}

// One matmul problem: weights of type t, activations converted as the matmul converts them.
struct Problem {
  DType type;
  int64_t k, n, m;
  std::vector<uint8_t> w;  // n rows of row_bytes(type, k)
  std::vector<float> x;    // m rows of k F32 activations
  DType act_type;
  std::vector<uint8_t> act;  // x converted to act_type, m rows of act_stride
  size_t w_stride, act_stride;
  std::vector<double> scale;  // per output: sum of |terms| the kernels add, for the bound
};

std::vector<float> act_values(DType act_type, const uint8_t* bytes, int64_t k) {
  std::vector<float> v(static_cast<size_t>(k));
  if (act_type == DType::Q8_1) {
    const auto* blocks = reinterpret_cast<const BlockQ8_1*>(bytes);
    for (int64_t i = 0; i < k; ++i)
      v[size_t(i)] = float(blocks[i / 32].qs[i % 32]) * fp16_to_f32(blocks[i / 32].d);
  } else if (act_type == DType::F32) {
    std::memcpy(v.data(), bytes, size_t(k) * sizeof(float));
  } else {
    dequantize_row(act_type, bytes, v.data(), k);
  }
  return v;
}

Problem make_problem(DType t, int64_t k, int64_t n, int64_t m, std::mt19937& rng) {
  Problem p{t, k, n, m, {}, {}, DType::F32, {}, row_bytes(t, k), 0, {}};
  const std::vector<float> wf = random_matrix(n, k, rng, 0.3f);
  p.w.resize(p.w_stride * size_t(n));
  for (int64_t r = 0; r < n; ++r)
    quantize_row(t, wf.data() + r * k, p.w.data() + size_t(r) * p.w_stride, k);
  p.x = random_matrix(m, k, rng, 0.0f);
  // The scalar level's conversion: every level converts bit for bit alike (vec_dot_test).
  const DotKernel& scalar = *cpu::dot_kernel_scalar(t);
  p.act_type = scalar.act_type;
  p.act_stride = p.act_type == DType::F32 ? size_t(k) * sizeof(float) : row_bytes(p.act_type, k);
  p.act.resize(p.act_stride * size_t(m));
  for (int64_t c = 0; c < m; ++c)
    scalar.act_from_f32(p.x.data() + c * k, p.act.data() + size_t(c) * p.act_stride, k);

  // |d_w q_w d_a q_a| <= (|w| + |m_w|) |a| per element, plus |m_w s_a| per block.
  std::vector<std::vector<float>> a(static_cast<size_t>(m));
  for (int64_t c = 0; c < m; ++c) {
    a[size_t(c)] = act_values(p.act_type, p.act.data() + size_t(c) * p.act_stride, k);
    for (float& v : a[size_t(c)]) v = std::fabs(v);
  }
  std::vector<float> wd(static_cast<size_t>(k)), mins(static_cast<size_t>(k / 32 + 1), 0.0f);
  p.scale.assign(size_t(n * m), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = p.w.data() + size_t(r) * p.w_stride;
    dequantize_row(t, row, wd.data(), k);
    if (block_size(t) == QK_K && t != DType::IQ4_XS) wd = kquant_magnitudes(t, row, k);
    if (has_min(t)) {
      const size_t block_bytes = dtype_info(t).block_bytes;
      for (int64_t b = 0; b < k / 32; ++b) {
        uint16_t bits;
        std::memcpy(&bits, row + size_t(b) * block_bytes + 2, 2);
        mins[size_t(b)] = std::fabs(fp16_to_f32(bits));
      }
    }
    for (int64_t i = 0; i < k; ++i) wd[size_t(i)] = std::fabs(wd[size_t(i)]) + mins[size_t(i / 32)];
    for (int64_t c = 0; c < m; ++c) {
      double s = 0;
      for (int64_t i = 0; i < k; ++i) s += double(wd[size_t(i)]) * a[size_t(c)][size_t(i)];
      if (has_min(t)) {
        const auto* blocks =
            reinterpret_cast<const BlockQ8_1*>(p.act.data() + size_t(c) * p.act_stride);
        for (int64_t b = 0; b < k / 32; ++b)
          s += mins[size_t(b)] * std::fabs(fp16_to_f32(blocks[b].s));
      }
      p.scale[size_t(c * n + r)] = s;
    }
  }
  return p;
}

// The row-dot results: output (row r, column c) at y[c * n + r].
std::vector<float> row_dots(const Problem& p, const DotKernel& k) {
  std::vector<float> y(size_t(p.n * p.m));
  for (int64_t c = 0; c < p.m; ++c)
    for (int64_t r = 0; r < p.n; ++r)
      y[size_t(c * p.n + r)] =
          k.dot(p.k, p.w.data() + size_t(r) * p.w_stride, p.act.data() + size_t(c) * p.act_stride);
  return y;
}

// The backend's matmul kernel on this problem, at one ISA level with a pool of `threads`.
std::vector<float> cpu_matmul(Problem& p, IsaLevel level, int threads) {
  ThreadPool pool(threads);
  cpu::Context ctx;
  ctx.pool = &pool;
  ctx.isa = level;
  Graph g;
  Tensor* w = g.leaf("w", p.type, {p.k, p.n, 1, 1}, p.w.data());
  Tensor* x = g.leaf("x", DType::F32, {p.k, p.m, 1, 1}, p.x.data());
  Tensor* y = g.matmul(w, x);
  std::vector<float> out(size_t(p.n * p.m), std::nanf(""));
  y->data = out.data();
  cpu::matmul(ctx, *y);
  return out;
}

std::string describe(const Problem& p) {
  return std::string(dtype_name(p.type)) + " K=" + std::to_string(p.k) +
         " N=" + std::to_string(p.n) + " M=" + std::to_string(p.m);
}

class GemmLevels : public ::testing::TestWithParam<IsaLevel> {
 protected:
  void SetUp() override {
    if (!isa_level_runs(GetParam())) {
      GTEST_SKIP() << "this CPU does not run the " << isa_level_name(GetParam())
                   << " kernels (best level: " << isa_level_name(best_isa_level()) << ")";
    }
  }
};

INSTANTIATE_TEST_SUITE_P(Gemm, GemmLevels,
                         ::testing::Values(IsaLevel::Avx2, IsaLevel::AvxVnni, IsaLevel::Avx512),
                         [](const auto& info) { return std::string(isa_level_name(info.param)); });

TEST_P(GemmLevels, EveryTypeHasATiledKernel) {
  for (DType t : kWeightTypes) {
    const GemmKernel* g = cpu::gemm_kernel(t, GetParam());
    ASSERT_NE(g, nullptr) << dtype_name(t);
    EXPECT_GE(g->rows, 2) << dtype_name(t);
    EXPECT_GE(g->cols, 2) << dtype_name(t);
    EXPECT_LE(g->cols, cpu::kMaxTileCols) << dtype_name(t);
    for (int j = 0; j < g->cols; ++j) EXPECT_NE(g->tiles[j], nullptr) << dtype_name(t);
    // The level's own variant: AVX-VNNI's tiles at the avxvnni level, the plain ones at avx2.
    if (GetParam() == IsaLevel::AvxVnni) {
      EXPECT_EQ(g, cpu::gemm_kernel_avxvnni(t)) << dtype_name(t);
    } else if (GetParam() == IsaLevel::Avx2) {
      EXPECT_EQ(g, cpu::gemm_kernel_avx2(t)) << dtype_name(t);
    }
  }
}

// Both paths add the same exact integer block sums scaled by the same float products, in a
// different order; every float sum of at most ~130 terms per lane rounds below 1e-5 of the
// sum of the magnitudes of its terms.
TEST_P(GemmLevels, MatchesRowDotsForEveryTypeAndShape) {
  std::mt19937 rng(2024 + unsigned(GetParam()));
  const DotKernel* dots[std::size(kWeightTypes)];
  for (size_t i = 0; i < std::size(kWeightTypes); ++i)
    dots[i] = &cpu::dot_kernel(kWeightTypes[i], GetParam());
  for (size_t ti = 0; ti < std::size(kWeightTypes); ++ti) {
    const DType t = kWeightTypes[ti];
    for (int64_t k : lengths_for(t)) {
      for (int64_t n : kRows) {
        for (int64_t m : kColumns) {
          Problem p = make_problem(t, k, n, m, rng);
          SCOPED_TRACE(describe(p));
          ASSERT_EQ(dots[ti]->act_type, p.act_type);
          const std::vector<float> want = row_dots(p, *dots[ti]);
          for (int threads : {1, 3}) {
            const std::vector<float> got = cpu_matmul(p, GetParam(), threads);
            int failures = 0;
            for (size_t i = 0; i < want.size() && failures < 5; ++i) {
              const double bound = 1e-5 * p.scale[i];
              if (!(std::fabs(double(got[i]) - want[i]) <= bound)) {
                ++failures;
                ADD_FAILURE() << threads << " threads, row " << i % size_t(n) << " column "
                              << i / size_t(n) << ": tiled " << got[i] << ", row dot " << want[i]
                              << ", bound " << bound;
              }
            }
          }
        }
      }
    }
  }
}

// Weights and activations that end at a guard page: every tile, the narrow ones at the edge of
// M included, reads exactly its k elements of its last row and column.
TEST_P(GemmLevels, TilesReadNothingPastTheirRowsAndColumns) {
  std::mt19937 rng(77);
  for (DType t : kWeightTypes) {
    const GemmKernel& g = *cpu::gemm_kernel(t, GetParam());
    const DotKernel& dot = cpu::dot_kernel(t, GetParam());
    const int64_t bs = block_size(t);
    for (int64_t k : bs == 1 ? std::vector<int64_t>{1, 13, 47} : std::vector<int64_t>{bs, 3 * bs}) {
      for (int width = 1; width <= g.cols; ++width) {
        Problem p = make_problem(t, k, g.rows, width, rng);
        SCOPED_TRACE(describe(p));
        GuardedBytes w(p.w.data(), p.w.size());
        GuardedBytes a(p.act.data(), p.act.size());
        std::vector<float> y(size_t(g.rows * width));
        g.tiles[width - 1](k, w.data(), p.w_stride, a.data(), p.act_stride, y.data(),
                           size_t(g.rows));
        const std::vector<float> want = row_dots(p, dot);
        for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-5 * p.scale[i]);
      }
    }
  }
}

// A tile kernel that counts how often each output of its R x C tile is written, and a row dot
// that marks its output, to check that the split into tasks covers every output exactly once.
constexpr int kCountRows = 3;
template <int C>
void count_tile(int64_t, const void*, size_t, const void*, size_t, float* y, size_t y_stride) {
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < kCountRows; ++r) y[size_t(c) * y_stride + size_t(r)] += 1.0f;
}
float count_dot(int64_t, const void*, const void*) { return 1.0f; }

TEST(GemmTasks, CoverEveryOutputOnce) {
  const GemmKernel counter{
      kCountRows, 4, {count_tile<1>, count_tile<2>, count_tile<3>, count_tile<4>}};
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 37, 64, 131, 1000, 4099}) {
      for (int64_t m : {2, 3, 5, 17, 64, 513}) {
        for (size_t w_stride : {size_t(18), size_t(4096), size_t(300000)}) {
          SCOPED_TRACE("threads " + std::to_string(threads) + " N=" + std::to_string(n) +
                       " M=" + std::to_string(m) + " row bytes " + std::to_string(w_stride));
          const cpu::GemmBlocking b = cpu::plan_gemm(n, m, w_stride, counter, threads);
          EXPECT_EQ(b.block_rows % counter.rows, 0);
          EXPECT_EQ(b.block_cols % counter.cols, 0);
          // Weights of a row block fit the cache budget unless one tile alone exceeds it.
          EXPECT_TRUE(size_t(b.block_rows) * w_stride <= 128 * 1024 ||
                      b.block_rows == counter.rows);
          std::vector<float> y(size_t(n * m), 0.0f);
          // The counting kernels read no weights or activations; only the pointers' arithmetic
          // happens.
          static const char nothing[1] = {};
          cpu::gemm(pool, counter, count_dot, 32, n, m, nothing, w_stride, nothing, 0, y.data(),
                    size_t(n));
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_EQ(y[i], 1.0f) << "row " << i % size_t(n) << " column " << i / size_t(n);
        }
      }
    }
  }
}

TEST(GemmTasks, EnoughTasksToBalanceTheThreads) {
  const GemmKernel g{4, 3, {count_tile<1>, count_tile<2>, count_tile<3>}};
  for (int threads : {2, 3, 16}) {
    // A 2048 x 2048 Q4_0 matrix against a 512-token prompt.
    const cpu::GemmBlocking b = cpu::plan_gemm(2048, 512, row_bytes(DType::Q4_0, 2048), g, threads);
    EXPECT_GE(b.n_row_blocks * b.n_col_blocks, 4 * threads) << threads << " threads";
    // Every column of a block streams past the block's weights: columns are split only when
    // the rows alone cannot feed the threads.
    if (2048 / b.block_rows >= 4 * threads) {
      EXPECT_EQ(b.n_col_blocks, 1);
    }
  }
}

// The engine's path: graph, scheduler and CPU device at the level this process runs, against
// the row dots of that level.
TEST(GemmScheduler, PromptSizedMatmulThroughTheCpuDevice) {
  DeviceOptions options;
  options.n_threads = 3;
  std::unique_ptr<Device> device = Registry::global().open("cpu", options);
  std::mt19937 rng(5);
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::F16}) {
    Problem p = make_problem(t, block_size(t) == 1 ? 301 : 320, 70, 33, rng);
    SCOPED_TRACE(describe(p));
    Graph g;
    Tensor* w = g.leaf("w", t, {p.k, p.n, 1, 1}, p.w.data());
    Tensor* x = g.leaf("x", DType::F32, {p.k, p.m, 1, 1}, p.x.data());
    Tensor* y = g.matmul(w, x);
    Scheduler s({device.get()}, true);
    s.run(g, {y});
    const float* got = static_cast<const float*>(y->data);
    const std::vector<float> want = row_dots(p, cpu::dot_kernel(t, active_isa_level()));
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5 * p.scale[i]) << i;
  }
}

}  // namespace
}  // namespace ps
