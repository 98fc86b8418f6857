// The CPU backend's mixture-of-experts kernels against plain references on random data:
// top_k (ties, NaN, k = n), the router's weights under each gating, matmul_id over the weight
// families (grouped prompts, one expert taken by every token, experts taken by none, packed
// constant weights), expert_sum; and that decode reads only the chosen experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "backend/registry.h"
#include "core/error.h"
#include "graph/graph.h"
#include "scheduler/scheduler.h"

namespace ps {
namespace {

std::vector<float> normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct Cpu {
  explicit Cpu(int threads) {
    DeviceOptions o;
    o.n_threads = threads;
    device = Registry::global().open("cpu", o);
  }
  template <typename T = float>
  std::vector<T> run(Graph& g, Tensor* out) {
    Scheduler s({device.get()}, true);
    s.run(g, {out});
    const T* p = static_cast<const T*>(out->data);
    return std::vector<T>(p, p + out->n_elements());
  }
  std::unique_ptr<Device> device;
};

class MoeOps : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Threads, MoeOps, ::testing::Values(1, 3));

// Indices by descending value, equal values in index order, NaN last.
std::vector<int32_t> reference_top_k(const float* v, int64_t n, int64_t k) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    if (std::isnan(v[a])) return false;
    if (std::isnan(v[b])) return true;
    return v[a] > v[b];
  });
  idx.resize(size_t(k));
  return idx;
}

TEST_P(MoeOps, TopKAgainstStableSort) {
  Cpu cpu(GetParam());
  for (int64_t n : {1, 5, 8, 64, 128}) {
    for (int64_t k : {int64_t(1), int64_t(2), int64_t(8), n}) {
      if (k > n) continue;
      const int64_t rows = 11;
      auto v = normal(size_t(n * rows), uint32_t(n * 31 + k), 3.0f);
      // Row 1 on a coarse grid (ties), row 2 all equal, row 3 with NaN and infinities.
      for (int64_t i = 0; i < n; ++i) v[size_t(n + i)] = std::round(v[size_t(n + i)]);
      for (int64_t i = 0; i < n; ++i) v[size_t(2 * n + i)] = 0.25f;
      v[size_t(3 * n)] = std::numeric_limits<float>::quiet_NaN();
      if (n > 2) v[size_t(3 * n + 2)] = std::numeric_limits<float>::infinity();
      if (n > 1) v[size_t(3 * n + 1)] = -std::numeric_limits<float>::infinity();
      Graph g;
      Tensor* x = g.leaf("x", DType::F32, {n, rows, 1, 1}, v.data());
      Tensor* out = g.top_k(x, int32_t(k));
      auto got = cpu.run<int32_t>(g, out);
      for (int64_t r = 0; r < rows; ++r) {
        auto want = reference_top_k(&v[size_t(r * n)], n, k);
        for (int64_t j = 0; j < k; ++j)
          ASSERT_EQ(got[size_t(r * k + j)], want[size_t(j)])
              << "n=" << n << " k=" << k << " row " << r << " slot " << j;
      }
    }
  }
}

TEST(MoeGraph, RefusesBadShapes) {
  Graph g;
  Tensor* z = g.leaf("z", DType::F32, {8, 3, 1, 1});
  EXPECT_THROW(g.top_k(z, 0), ModelError);
  EXPECT_THROW(g.top_k(z, 9), ModelError);
  Tensor* ids = g.leaf("ids", DType::I32, {2, 4, 1, 1});  // 4 tokens, z has 3
  EXPECT_THROW(g.expert_weights(z, ids, {}), ModelError);
  Tensor* w = g.leaf("w", DType::F32, {16, 5, 8, 1});
  Tensor* x = g.leaf("x", DType::F32, {16, 3, 4, 1});  // 3 inputs per token for k = 2
  EXPECT_THROW(g.matmul_id(w, x, ids), ModelError);
  Tensor* y = g.leaf("y", DType::F32, {5, 3, 4, 1});
  EXPECT_THROW(g.expert_sum(y, ids), ModelError);
}

TEST_P(MoeOps, ExpertWeightsEveryGating) {
  Cpu cpu(GetParam());
  const int64_t E = 12, k = 3, T = 6;
  auto z = normal(size_t(E * T), 7, 2.0f);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < T; ++t) {
    auto top = reference_top_k(&z[size_t(t * E)], E, k);
    if (t == 2) std::swap(top[0], top[2]);  // any order of the chosen, not only ranked
    ids.insert(ids.end(), top.begin(), top.end());
  }
  for (ExpertGating gating :
       {ExpertGating::Softmax, ExpertGating::Sigmoid, ExpertGating::SoftmaxSelected}) {
    for (bool normalize : {false, true}) {
      for (float scale : {1.0f, 2.5f}) {
        Graph g;
        Tensor* zt = g.leaf("z", DType::F32, {E, T, 1, 1}, z.data());
        Tensor* it = g.leaf("ids", DType::I32, {k, T, 1, 1}, ids.data());
        auto got = cpu.run(g, g.expert_weights(zt, it, {gating, normalize, scale}));
        for (int64_t t = 0; t < T; ++t) {
          const float* zr = &z[size_t(t * E)];
          std::vector<double> w(static_cast<size_t>(k));
          double all = 0, chosen = 0;
          for (int64_t e = 0; e < E; ++e) all += std::exp(double(zr[e]));
          for (int64_t j = 0; j < k; ++j) chosen += std::exp(double(zr[ids[size_t(t * k + j)]]));
          for (int64_t j = 0; j < k; ++j) {
            const double zj = zr[ids[size_t(t * k + j)]];
            w[size_t(j)] = gating == ExpertGating::Softmax   ? std::exp(zj) / all
                           : gating == ExpertGating::Sigmoid ? 1.0 / (1.0 + std::exp(-zj))
                                                             : std::exp(zj) / chosen;
          }
          const double sum = std::accumulate(w.begin(), w.end(), 0.0);
          for (int64_t j = 0; j < k; ++j) {
            const double want = (normalize ? w[size_t(j)] / sum : w[size_t(j)]) * scale;
            EXPECT_NEAR(got[size_t(t * k + j)], want, 1e-6 * std::max(1.0, want))
                << int(gating) << " normalize " << normalize << " token " << t << " slot " << j;
          }
        }
      }
    }
  }
}

struct IdShape {
  int64_t E, k, T;
  bool per_slot;
  int first;  // an expert every token takes first, or -1
  int lo;     // experts below lo are taken by none
};

// matmul_id against the dequantized experts, with the bound of cpu_ops_test's matmul check
// (8-bit activations for quantized weights).
// A device of its own per call: packed copies are kept by the weights' address, which a later
// call's weights may reuse.
void check_matmul_id(int threads, DType t, const IdShape& s, bool constant) {
  Cpu cpu(threads);
  const int64_t K = block_size(t) == 256 ? 256 : block_size(t) > 1 ? 96 : 45, N = 19;
  auto wf = normal(size_t(K * N * s.E), 3);
  std::vector<uint8_t> wq(row_bytes(t, K) * size_t(N * s.E));
  std::vector<float> wd(wf.size());
  for (int64_t r = 0; r < N * s.E; ++r) {
    quantize_row(t, &wf[size_t(r * K)], &wq[size_t(r) * row_bytes(t, K)], K);
    dequantize_row(t, &wq[size_t(r) * row_bytes(t, K)], &wd[size_t(r * K)], K);
  }
  const int64_t B = s.per_slot ? s.k : 1;
  auto x = normal(size_t(K * B * s.T), 5);
  std::mt19937 rng(uint32_t(s.T * 7 + s.k));
  std::vector<int32_t> ids;
  for (int64_t tok = 0; tok < s.T; ++tok) {
    std::vector<int32_t> all;
    for (int32_t e = s.lo; e < s.E; ++e) all.push_back(e);
    std::shuffle(all.begin(), all.end(), rng);
    if (s.first >= 0) std::iter_swap(all.begin(), std::find(all.begin(), all.end(), s.first));
    ids.insert(ids.end(), all.begin(), all.begin() + s.k);
  }
  Graph g;
  Tensor* w = g.leaf("w", t, {K, N, s.E, 1}, wq.data());
  w->constant = constant;  // a model weight: the packed per-expert copies
  Tensor* xt = g.leaf("x", DType::F32, {K, B, s.T, 1}, x.data());
  Tensor* it = g.leaf("ids", DType::I32, {s.k, s.T, 1, 1}, ids.data());
  auto got = cpu.run(g, g.matmul_id(w, xt, it));
  ASSERT_EQ(got.size(), size_t(N * s.k * s.T));
  const bool act_quantized = block_size(t) > 1;
  for (int64_t tok = 0; tok < s.T; ++tok) {
    for (int64_t j = 0; j < s.k; ++j) {
      const int32_t e = ids[size_t(tok * s.k + j)];
      const float* xr = &x[size_t((tok * B + (s.per_slot ? j : 0)) * K)];
      for (int64_t n = 0; n < N; ++n) {
        const float* wr = &wd[size_t((e * N + n) * K)];
        double ref = 0, bound = 1e-5;
        for (int64_t b = 0; b < K; b += 32) {
          double amax = 0, wsum = 0;
          for (int64_t i = b; i < std::min(K, b + 32); ++i) {
            ref += double(wr[i]) * xr[i];
            amax = std::max(amax, double(std::fabs(xr[i])));
            wsum += std::fabs(wr[i]);
            bound += 1e-5 * std::fabs(double(wr[i]) * xr[i]);
          }
          if (act_quantized) bound += wsum * amax / 254.0 * 1.01;
        }
        ASSERT_NEAR(got[size_t((tok * s.k + j) * N + n)], ref, bound)
            << dtype_name(t) << " E=" << s.E << " k=" << s.k << " T=" << s.T << " token " << tok
            << " slot " << j << " (expert " << e << ") row " << n << (constant ? " packed" : "");
      }
    }
  }
}

TEST_P(MoeOps, MatMulIdAgainstDequantizedExperts) {
  const IdShape shapes[] = {
      {6, 2, 1, false, -1, 0},   {6, 2, 5, true, -1, 0}, {6, 2, 70, false, -1, 2},
      {6, 3, 70, true, 3, 0},    {6, 1, 9, false, 4, 0}, {4, 4, 7, true, -1, 0},
      {64, 8, 40, false, -1, 0},
  };
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q5_1,
                  DType::Q4_K, DType::Q6_K})
    for (const IdShape& s : shapes)
      for (bool constant : {false, true}) check_matmul_id(GetParam(), t, s, constant);
}

TEST_P(MoeOps, MatMulIdReadsOnlyTheChosenExperts) {
  // Every expert but the chosen ones is NaN: any read of them would show in the output.
  const int64_t K = 64, N = 24, E = 8;
  for (bool constant : {false, true}) {
    Cpu cpu(GetParam());
    auto w = normal(size_t(K * N * E), 9);
    std::vector<int32_t> ids = {5, 2, 2, 5, 5, 2};  // 3 tokens, 2 slots
    for (int64_t e = 0; e < E; ++e)
      if (e != 2 && e != 5)
        std::fill_n(w.begin() + e * K * N, K * N, std::numeric_limits<float>::quiet_NaN());
    std::vector<uint8_t> q(row_bytes(DType::Q8_0, K) * size_t(N * E));
    for (int64_t r = 0; r < N * E; ++r)
      quantize_row(DType::Q8_0, &w[size_t(r * K)], &q[size_t(r) * row_bytes(DType::Q8_0, K)], K);
    auto x = normal(size_t(K * 3), 10);
    Graph g;
    Tensor* wt = g.leaf("w", DType::Q8_0, {K, N, E, 1}, q.data());
    wt->constant = constant;
    Tensor* xt = g.leaf("x", DType::F32, {K, 1, 3, 1}, x.data());
    Tensor* it = g.leaf("ids", DType::I32, {2, 3, 1, 1}, ids.data());
    for (float v : cpu.run(g, g.matmul_id(wt, xt, it))) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST_P(MoeOps, MatMulIdRefusesIdsOutsideTheExperts) {
  Cpu cpu(GetParam());
  for (int32_t bad : {-1, 4}) {
    auto w = normal(size_t(32 * 3 * 4), 1);
    auto x = normal(32 * 2, 2);
    std::vector<int32_t> ids = {0, bad};
    Graph g;
    Tensor* wt = g.leaf("w", DType::F32, {32, 3, 4, 1}, w.data());
    Tensor* xt = g.leaf("x", DType::F32, {32, 1, 2, 1}, x.data());
    Tensor* it = g.leaf("ids", DType::I32, {1, 2, 1, 1}, ids.data());
    EXPECT_THROW(cpu.run(g, g.matmul_id(wt, xt, it)), BackendError) << bad;
  }
}

TEST_P(MoeOps, ExpertSumAndSigmoid) {
  Cpu cpu(GetParam());
  const int64_t n = 70, k = 3, T = 5;
  auto x = normal(size_t(n * k * T), 4);
  auto w = normal(size_t(k * T), 6);
  Graph g;
  Tensor* xt = g.leaf("x", DType::F32, {n, k, T, 1}, x.data());
  Tensor* wt = g.leaf("w", DType::F32, {k, T, 1, 1}, w.data());
  auto got = cpu.run(g, g.expert_sum(xt, wt));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int64_t j = 0; j < k; ++j)
        want += double(w[size_t(t * k + j)]) * x[size_t((t * k + j) * n + i)];
      EXPECT_NEAR(got[size_t(t * n + i)], want, 1e-5) << t << " " << i;
    }
  Graph g2;
  Tensor* s = g2.sigmoid(g2.leaf("x", DType::F32, {n, k * T, 1, 1}, x.data()));
  auto sig = cpu.run(g2, s);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(sig[i], 1.0 / (1.0 + std::exp(-double(x[i]))), 1e-6);
}

}  // namespace
}  // namespace ps
