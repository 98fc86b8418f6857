// Every CPU kernel against a plain scalar reference, on random data of awkward shapes, through
// the same graph + scheduler path the engine uses, with 1 and 3 threads.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>

#include "backend/registry.h"
#include "core/error.h"
#include "core/fp16.h"
#include "graph/graph.h"
#include "scheduler/scheduler.h"

namespace ps {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& v, int64_t row) {
  std::vector<uint8_t> q(row_bytes(t, row) * (v.size() / size_t(row)));
  for (size_t r = 0; r < v.size() / size_t(row); ++r)
    quantize_row(t, v.data() + r * size_t(row), q.data() + r * row_bytes(t, row), row);
  return q;
}

std::vector<float> dequantize(DType t, const std::vector<uint8_t>& q, int64_t row) {
  const size_t rows = q.size() / row_bytes(t, row);
  std::vector<float> v(rows * size_t(row));
  for (size_t r = 0; r < rows; ++r)
    dequantize_row(t, q.data() + r * row_bytes(t, row), v.data() + r * size_t(row), row);
  return v;
}

struct Runner {
  explicit Runner(int threads) {
    DeviceOptions o;
    o.n_threads = threads;
    device = Registry::global().open("cpu", o);
  }
  std::vector<float> run(Graph& g, Tensor* out) {
    Scheduler s({device.get()}, true);
    s.run(g, {out});
    const float* p = static_cast<const float*>(out->data);
    return std::vector<float>(p, p + out->n_elements());
  }
  std::unique_ptr<Device> device;
};

class CpuOps : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Threads, CpuOps, ::testing::Values(1, 3));

const DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                              DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1};

TEST_P(CpuOps, MatmulEveryDtypeAgainstDequantizedReference) {
  Runner r(GetParam());
  for (DType t : kWeightTypes) {
    for (int64_t M : {1, 3, 17}) {
      const int64_t K = block_size(t) == 1 ? 83 : 32 * 7, N = 37;
      auto wf = random_floats(size_t(K * N), 11 + uint32_t(M));
      auto x = random_floats(size_t(K * M), 23 + uint32_t(M));
      auto wq = quantize(t, wf, K);
      auto wd = dequantize(t, wq, K);  // what the kernel should be multiplying
      Graph g;
      Tensor* w = g.leaf("w", t, {K, N, 1, 1}, wq.data());
      Tensor* xt = g.leaf("x", DType::F32, {K, M, 1, 1}, x.data());
      Tensor* y = g.matmul(w, xt);
      auto got = r.run(g, y);
      const bool act_quantized = block_size(t) > 1;
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
          double ref = 0, bound = 0;
          for (int64_t b = 0; b < K; b += 32) {
            double amax = 0, wsum = 0;
            for (int64_t k = b; k < std::min(K, b + 32); ++k) {
              const double wk = wd[size_t(n * K + k)], xk = x[size_t(m * K + k)];
              ref += wk * xk;
              amax = std::max(amax, std::fabs(xk));
              wsum += std::fabs(wk);
              bound += 1e-5 * std::fabs(wk * xk);
            }
            // 8-bit activations: each value is off by at most half a step of amax/127.
            if (act_quantized) bound += wsum * amax / 254.0 * 1.01;
          }
          EXPECT_NEAR(got[size_t(m * N + n)], ref, bound + 1e-5)
              << dtype_name(t) << " M=" << M << " n=" << n << " m=" << m;
        }
      }
    }
  }
}

TEST_P(CpuOps, GetRowsEveryDtype) {
  Runner r(GetParam());
  for (DType t : kWeightTypes) {
    const int64_t n = block_size(t) == 1 ? 45 : 96, rows = 13;
    auto tf = random_floats(size_t(n * rows), 5);
    auto tq = quantize(t, tf, n);
    auto td = dequantize(t, tq, n);
    std::vector<int32_t> ids = {12, 0, 7, 7, 3};
    Graph g;
    Tensor* table = g.leaf("t", t, {n, rows, 1, 1}, tq.data());
    Tensor* id = g.leaf("ids", DType::I32, {int64_t(ids.size()), 1, 1, 1}, ids.data());
    auto got = r.run(g, g.get_rows(table, id));
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(got[i * size_t(n) + size_t(j)], td[size_t(ids[i] * n + j)]) << dtype_name(t);
  }
}

TEST_P(CpuOps, RmsNormAndBroadcastMul) {
  Runner r(GetParam());
  const int64_t n = 77, rows = 9;
  auto x = random_floats(size_t(n * rows), 3, 2.0f);
  auto w = random_floats(size_t(n), 4);
  Graph g;
  Tensor* xt = g.leaf("x", DType::F32, {n, rows, 1, 1}, x.data());
  Tensor* wt = g.leaf("w", DType::F32, {n, 1, 1, 1}, w.data());
  auto got = r.run(g, g.mul(g.rms_norm(xt, 1e-5f), wt));
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += double(x[size_t(i * n + j)]) * x[size_t(i * n + j)];
    const double s = 1.0 / std::sqrt(ss / double(n) + 1e-5);
    for (int64_t j = 0; j < n; ++j) {
      const double ref = x[size_t(i * n + j)] * s * w[size_t(j)];
      ASSERT_NEAR(got[size_t(i * n + j)], ref, 1e-5 * (1 + std::fabs(ref)));
    }
  }
}

TEST_P(CpuOps, ElementwiseOps) {
  Runner r(GetParam());
  const int64_t n = 53, rows = 7;
  auto a = random_floats(size_t(n * rows), 8, 3.0f);
  auto b = random_floats(size_t(n * rows), 9, 3.0f);
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  auto gelu = [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  const float s = -1.7f;
  for (OpKind op :
       {OpKind::Add, OpKind::Mul, OpKind::Silu, OpKind::Gelu, OpKind::Scale, OpKind::SwiGlu}) {
    Graph g;
    Tensor* at = g.leaf("a", DType::F32, {n, rows, 1, 1}, a.data());
    Tensor* bt = g.leaf("b", DType::F32, {n, rows, 1, 1}, b.data());
    Tensor* out = op == OpKind::Add     ? g.add(at, bt)
                  : op == OpKind::Mul   ? g.mul(at, bt)
                  : op == OpKind::Silu  ? g.silu(at)
                  : op == OpKind::Gelu  ? g.gelu(at)
                  : op == OpKind::Scale ? g.scale(at, s)
                                        : g.swiglu(at, bt);
    auto got = r.run(g, out);
    for (size_t i = 0; i < got.size(); ++i) {
      const double x = a[i], y = b[i];
      const double ref = op == OpKind::Add     ? x + y
                         : op == OpKind::Mul   ? x * y
                         : op == OpKind::Silu  ? silu(x)
                         : op == OpKind::Gelu  ? gelu(x)
                         : op == OpKind::Scale ? x * double(s)
                                               : silu(x) * y;
      ASSERT_NEAR(got[i], ref, 1e-5 * (1 + std::fabs(ref))) << op_name(op) << " at " << i;
    }
  }
}

// gpt-oss's clamped SwiGLU, on values of both signs beyond the limit (graph/ops.h), with the
// default parameters and others.
TEST_P(CpuOps, SwiGluOaiClampsGateAndUp) {
  Runner r(GetParam());
  const int64_t n = 61, rows = 5;
  auto a = random_floats(size_t(n * rows), 18, 8.0f);
  auto b = random_floats(size_t(n * rows), 19, 8.0f);
  for (const SwiGluOaiParams& p : {SwiGluOaiParams{}, SwiGluOaiParams{0.5f, 3.0f}}) {
    Graph g;
    Tensor* at = g.leaf("a", DType::F32, {n, rows, 1, 1}, a.data());
    Tensor* bt = g.leaf("b", DType::F32, {n, rows, 1, 1}, b.data());
    auto got = r.run(g, g.swiglu_oai(at, bt, p));
    int clamped_gate = 0, clamped_up = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double limit = p.limit, x = std::min<double>(a[i], limit);
      const double y = std::clamp<double>(b[i], -limit, limit);
      clamped_gate += a[i] > p.limit;
      clamped_up += std::fabs(b[i]) > p.limit;
      const double ref = x / (1 + std::exp(-double(p.alpha) * x)) * (y + 1);
      ASSERT_NEAR(got[i], ref, 1e-5 * (1 + std::fabs(ref))) << "at " << i;
    }
    EXPECT_GT(clamped_gate, 10);
    EXPECT_GT(clamped_up, 20);
  }
  Graph g;
  Tensor* at = g.leaf("a", DType::F32, {n, rows, 1, 1}, a.data());
  Tensor* bt = g.leaf("b", DType::F32, {n, 1, 1, 1}, b.data());
  EXPECT_THROW(g.swiglu_oai(at, bt, {}), ModelError);
  Tensor* ct = g.leaf("c", DType::F32, {n, rows, 1, 1}, b.data());
  EXPECT_THROW(g.swiglu_oai(at, ct, SwiGluOaiParams{1.0f, 0.0f}), ModelError);
}

TEST_P(CpuOps, RopeNormalAndNeoX) {
  Runner r(GetParam());
  const int64_t hd = 12, heads = 3, T = 5;
  const int n_rot = 8;
  auto x = random_floats(size_t(hd * heads * T), 10);
  std::vector<int32_t> pos = {0, 1, 7, 100, 3};
  for (RopeMode mode : {RopeMode::Normal, RopeMode::NeoX}) {
    Graph g;
    Tensor* xt = g.leaf("x", DType::F32, {hd, heads, T, 1}, x.data());
    Tensor* pt = g.leaf("p", DType::I32, {T, 1, 1, 1}, pos.data());
    const float base = 10000.0f, scale = 0.25f;
    auto got = r.run(g, g.rope(xt, pt, n_rot, base, scale, mode));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        const float* in = x.data() + (t * heads + h) * hd;
        const float* out = got.data() + (t * heads + h) * hd;
        for (int i = 0; i < n_rot / 2; ++i) {
          const double th = pos[size_t(t)] * scale * std::pow(double(base), -2.0 * i / n_rot);
          const int a = mode == RopeMode::NeoX ? i : 2 * i;
          const int b = mode == RopeMode::NeoX ? i + n_rot / 2 : 2 * i + 1;
          EXPECT_NEAR(out[a], in[a] * std::cos(th) - in[b] * std::sin(th), 1e-5);
          EXPECT_NEAR(out[b], in[a] * std::sin(th) + in[b] * std::cos(th), 1e-5);
        }
        for (int64_t i = n_rot; i < hd; ++i) EXPECT_EQ(out[i], in[i]);
      }
  }
}

// The device keeps rope's angles while positions and parameters repeat (the q and k of every
// layer): each run on one device must still see its own positions, base, scale and factors.
TEST_P(CpuOps, RopeAnglesFollowEachRunsPositionsAndParameters) {
  Runner r(GetParam());
  const int64_t hd = 8, heads = 2, T = 3;
  const int n_rot = 8;
  auto x = random_floats(size_t(hd * heads * T), 12);
  struct Run {
    std::vector<int32_t> pos;
    float base, scale;
    std::vector<float> factors;  // empty: none
  };
  const std::vector<Run> runs = {{{5, 6, 7}, 10000.0f, 1.0f, {}},
                                 {{5, 6, 7}, 10000.0f, 1.0f, {}},
                                 {{5, 6, 7}, 500.0f, 1.0f, {}},
                                 {{5, 6, 7}, 500.0f, 0.5f, {}},
                                 {{8, 6, 7}, 500.0f, 0.5f, {}},
                                 {{8, 6, 7}, 500.0f, 0.5f, {1.0f, 2.0f, 4.0f, 8.0f}},
                                 {{8, 6, 7}, 500.0f, 0.5f, {1.0f, 3.0f, 4.0f, 8.0f}},
                                 {{8, 6}, 500.0f, 0.5f, {}}};
  for (size_t k = 0; k < runs.size(); ++k) {
    const Run& run = runs[k];
    const int64_t n_tok = int64_t(run.pos.size());
    Graph g;
    Tensor* xt = g.leaf("x", DType::F32, {hd, heads, n_tok, 1}, x.data());
    Tensor* pt = g.leaf("p", DType::I32, {n_tok, 1, 1, 1}, const_cast<int32_t*>(run.pos.data()));
    Tensor* ft = run.factors.empty() ? nullptr
                                     : g.leaf("f", DType::F32, {n_rot / 2, 1, 1, 1},
                                              const_cast<float*>(run.factors.data()));
    auto got = r.run(g, g.rope(xt, pt, n_rot, run.base, run.scale, RopeMode::Normal, ft));
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int i = 0; i < n_rot / 2; ++i) {
          double th =
              run.pos[size_t(t)] * double(run.scale) * std::pow(double(run.base), -2.0 * i / n_rot);
          if (!run.factors.empty()) th /= run.factors[size_t(i)];
          const float* in = x.data() + (t * heads + h) * hd;
          const float* out = got.data() + (t * heads + h) * hd;
          EXPECT_NEAR(out[2 * i], in[2 * i] * std::cos(th) - in[2 * i + 1] * std::sin(th), 1e-5)
              << "run " << k << " token " << t << " pair " << i;
          EXPECT_NEAR(out[2 * i + 1], in[2 * i] * std::sin(th) + in[2 * i + 1] * std::cos(th), 1e-5)
              << "run " << k << " token " << t << " pair " << i;
        }
  }
}

TEST_P(CpuOps, SoftmaxWithAndWithoutCausalMask) {
  Runner r(GetParam());
  const int64_t n = 19, rows = 6;
  auto x = random_floats(size_t(n * rows), 12, 4.0f);
  for (int32_t causal : {-1, 0, 5}) {
    Graph g;
    Tensor* xt = g.leaf("x", DType::F32, {n, rows, 1, 1}, x.data());
    auto got = r.run(g, g.softmax(xt, 0.7f, causal));
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t vis = causal < 0 ? n : std::min<int64_t>(n, i + causal + 1);
      double mx = -1e30, sum = 0;
      for (int64_t j = 0; j < vis; ++j) mx = std::max(mx, 0.7 * x[size_t(i * n + j)]);
      for (int64_t j = 0; j < vis; ++j) sum += std::exp(0.7 * x[size_t(i * n + j)] - mx);
      for (int64_t j = 0; j < n; ++j) {
        const double ref = j < vis ? std::exp(0.7 * x[size_t(i * n + j)] - mx) / sum : 0.0;
        ASSERT_NEAR(got[size_t(i * n + j)], ref, 1e-6) << "causal " << causal;
      }
    }
  }
}

// Attention of one query row over cache positions [first, end) in double precision: K and V
// element i of position j through k_at(j, i) and v_at(j, i); a sink (graph/ops.h) is one more
// logit without a value (-inf: none).
template <typename KAt, typename VAt>
std::vector<double> attention_reference(const float* qrow, int64_t hd, int64_t first, int64_t end,
                                        float scale, KAt k_at, VAt v_at, double sink = -INFINITY) {
  std::vector<double> s(static_cast<size_t>(end), 0.0);
  double mx = std::max(-1e30, sink);
  for (int64_t j = first; j < end; ++j) {
    double d = 0;
    for (int64_t i = 0; i < hd; ++i) d += double(qrow[i]) * k_at(j, i);
    s[size_t(j)] = d * scale;
    mx = std::max(mx, s[size_t(j)]);
  }
  double sum = std::exp(sink - mx);
  for (int64_t j = first; j < end; ++j) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
  std::vector<double> out(static_cast<size_t>(hd), 0.0);
  for (int64_t i = 0; i < hd; ++i)
    for (int64_t j = first; j < end; ++j) out[size_t(i)] += s[size_t(j)] / sum * v_at(j, i);
  return out;
}

// Asserts the attention output of query row `row` (token t, head h: t * n_head + h) against
// attention_reference over cache positions [first, end), cache element i of position j being
// k[at(j, i)] and v[at(j, i)] (fp16).
template <typename At>
void expect_row_matches_reference(const std::vector<float>& got, const std::vector<float>& q,
                                  const std::vector<uint16_t>& k, const std::vector<uint16_t>& v,
                                  int64_t row, int64_t hd, int64_t first, int64_t end, float scale,
                                  const At& at, double sink = -INFINITY) {
  const std::vector<double> ref = attention_reference(
      &q[size_t(row * hd)], hd, first, end, scale,
      [&](int64_t j, int64_t i) { return fp16_to_f32(k[at(j, i)]); },
      [&](int64_t j, int64_t i) { return fp16_to_f32(v[at(j, i)]); }, sink);
  for (int64_t i = 0; i < hd; ++i)
    ASSERT_NEAR(got[size_t(row * hd + i)], ref[size_t(i)], 2e-5) << "element " << i;
}

// Shapes: a group of 3 query heads per cache head (2 cache heads); one cache head for 8 query
// heads with a head size off the vector steps and more tokens than one block of queries; plain
// multi-head attention over many tokens; a group of 4 with a long prefix. Windows: none, one
// shorter than the cached prefix, ones that cut into the batch.
TEST_P(CpuOps, AttentionOverF16CacheWithGqa) {
  Runner r(GetParam());
  struct Shape {
    int64_t hd, n_head, n_kv, T;
    int32_t n_past;
  };
  for (const Shape& sh : {Shape{16, 6, 2, 4, 9}, Shape{40, 8, 1, 13, 41}, Shape{24, 3, 3, 37, 5},
                          Shape{72, 8, 2, 21, 70}}) {
    const int64_t hd = sh.hd, n_head = sh.n_head, n_kv = sh.n_kv, T = sh.T;
    const int32_t n_past = sh.n_past;
    const int64_t n_ctx = n_past + T + 2;
    auto q = random_floats(size_t(hd * n_head * T), 13);
    auto kf = random_floats(size_t(hd * n_kv * n_ctx), 14);
    auto vf = random_floats(size_t(hd * n_kv * n_ctx), 15);
    std::vector<uint16_t> k(kf.size()), v(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) k[i] = f32_to_fp16(kf[i]), v[i] = f32_to_fp16(vf[i]);
    // Sinks of the scores' size, and one far above them (it takes nearly all the weight).
    auto sinks = random_floats(size_t(n_head), 16, 2.0f);
    sinks[0] = 25.0f;
    for (int32_t window : {0, 3, 11, 29})
      for (bool with_sinks : {false, true}) {
        SCOPED_TRACE("head size " + std::to_string(hd) + ", heads " + std::to_string(n_head) + "/" +
                     std::to_string(n_kv) + ", tokens " + std::to_string(T) + ", window " +
                     std::to_string(window) + (with_sinks ? ", sinks" : ""));
        Graph g;
        Tensor* qt = g.leaf("q", DType::F32, {hd, n_head, T, 1}, q.data());
        Tensor* kt = g.leaf("k", DType::F16, {hd, n_kv, n_ctx, 1}, k.data());
        Tensor* vt = g.leaf("v", DType::F16, {hd, n_kv, n_ctx, 1}, v.data());
        Tensor* st =
            with_sinks ? g.leaf("sinks", DType::F32, {n_head, 1, 1, 1}, sinks.data()) : nullptr;
        const float scale = 0.3f;
        auto got = r.run(g, g.attention(qt, kt, vt, n_past, scale, window, st));
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < n_head; ++h) {
            const int64_t kvh = h / (n_head / n_kv), end = n_past + t + 1;
            const int64_t first = window > 0 ? std::max<int64_t>(0, end - window) : 0;
            const auto at = [&](int64_t j, int64_t i) { return size_t((j * n_kv + kvh) * hd + i); };
            ASSERT_NO_FATAL_FAILURE(
                expect_row_matches_reference(got, q, k, v, t * n_head + h, hd, first, end, scale,
                                             at, with_sinks ? double(sinks[size_t(h)]) : -INFINITY))
                << "token " << t << " head " << h;
          }
      }
  }
}

// A sliding-window layer's ring cache: positions live in slot position % slots, and attention
// over the ring equals attention over a cache that holds every position.
TEST_P(CpuOps, AttentionOverARingCacheMatchesTheFullCache) {
  Runner r(GetParam());
  // Ring sizes (window + T - 1) that are and are not multiples of the score tiles' row count,
  // so that the wrap falls between and inside a tile's rows.
  struct Case {
    int64_t hd, T;
    int32_t window;
  };
  for (const Case& c : {Case{16, 4, 5}, Case{16, 4, 6}, Case{24, 9, 7}, Case{40, 20, 13}}) {
    SCOPED_TRACE("head size " + std::to_string(c.hd) + ", tokens " + std::to_string(c.T) +
                 ", window " + std::to_string(c.window));
    const int64_t hd = c.hd, n_head = 4, n_kv = 2, T = c.T;
    const int32_t n_past = 17, window = c.window;
    const int64_t n_full = n_past + T, slots = window + T - 1;
    auto q = random_floats(size_t(hd * n_head * T), 21);
    auto kf = random_floats(size_t(hd * n_kv * n_full), 22);
    auto vf = random_floats(size_t(hd * n_kv * n_full), 23);
    std::vector<uint16_t> k(kf.size()), v(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) k[i] = f32_to_fp16(kf[i]), v[i] = f32_to_fp16(vf[i]);
    const size_t row = size_t(hd * n_kv);
    std::vector<uint16_t> kr(row * size_t(slots)), vr(row * size_t(slots));
    for (int64_t j = n_full - slots; j < n_full; ++j)
      for (size_t e = 0; e < row; ++e) {
        kr[size_t(j % slots) * row + e] = k[size_t(j) * row + e];
        vr[size_t(j % slots) * row + e] = v[size_t(j) * row + e];
      }
    auto run = [&](std::vector<uint16_t>& kc, std::vector<uint16_t>& vc, int64_t n) {
      Graph g;
      Tensor* qt = g.leaf("q", DType::F32, {hd, n_head, T, 1}, q.data());
      Tensor* kt = g.leaf("k", DType::F16, {hd, n_kv, n, 1}, kc.data());
      Tensor* vt = g.leaf("v", DType::F16, {hd, n_kv, n, 1}, vc.data());
      return r.run(g, g.attention(qt, kt, vt, n_past, 0.3f, window));
    };
    const std::vector<float> full = run(k, v, n_full), ring = run(kr, vr, slots);
    ASSERT_EQ(full.size(), ring.size());
    for (size_t i = 0; i < full.size(); ++i) ASSERT_EQ(full[i], ring[i]) << "at " << i;
  }
}

// Tokens of several sequences in one op: each token at its own position in its own cache
// plane (per-token data, graph/ops.h), against a double-precision reference; positions out of
// order, planes repeated and skipped, windows that cut the history.
TEST_P(CpuOps, AttentionOverPerTokenPositionsAndPlanes) {
  Runner r(GetParam());
  const int64_t hd = 24, n_head = 6, n_kv = 3, slots = 19, planes = 3, T = 5;
  const int32_t info[2 * T] = {7, 2, 0, 0, 12, 2, 18, 1, 3, 0};  // (position, plane) per token
  auto q = random_floats(size_t(hd * n_head * T), 31);
  auto kf = random_floats(size_t(hd * n_kv * slots * planes), 32);
  auto vf = random_floats(size_t(hd * n_kv * slots * planes), 33);
  std::vector<uint16_t> k(kf.size()), v(vf.size());
  for (size_t i = 0; i < kf.size(); ++i) k[i] = f32_to_fp16(kf[i]), v[i] = f32_to_fp16(vf[i]);
  std::vector<int32_t> info_v(info, info + 2 * T);
  for (int32_t window : {0, 4}) {
    Graph g;
    Tensor* qt = g.leaf("q", DType::F32, {hd, n_head, T, 1}, q.data());
    Tensor* kt = g.leaf("k", DType::F16, {hd, n_kv, slots, planes}, k.data());
    Tensor* vt = g.leaf("v", DType::F16, {hd, n_kv, slots, planes}, v.data());
    Tensor* it = g.leaf("info", DType::I32, {2, T, 1, 1}, info_v.data());
    const float scale = 0.25f;
    auto got = r.run(g, g.attention_tokens(qt, kt, vt, it, scale, window));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < n_head; ++h) {
        const int64_t kvh = h / (n_head / n_kv), end = info[2 * t] + 1, pl = info[2 * t + 1];
        const int64_t first = window > 0 ? std::max<int64_t>(0, end - window) : 0;
        const auto at = [&](int64_t j, int64_t i) {
          return size_t(((pl * slots + j % slots) * n_kv + kvh) * hd + i);
        };
        ASSERT_NO_FATAL_FAILURE(
            expect_row_matches_reference(got, q, k, v, t * n_head + h, hd, first, end, scale, at))
            << "window " << window << " token " << t << " head " << h;
      }
  }
  // A plane beyond the cache is an error, not a read past it.
  std::vector<int32_t> bad = info_v;
  bad[3] = 3;
  Graph g;
  Tensor* qt = g.leaf("q", DType::F32, {hd, n_head, T, 1}, q.data());
  Tensor* kt = g.leaf("k", DType::F16, {hd, n_kv, slots, planes}, k.data());
  Tensor* vt = g.leaf("v", DType::F16, {hd, n_kv, slots, planes}, v.data());
  Tensor* it = g.leaf("info", DType::I32, {2, T, 1, 1}, bad.data());
  EXPECT_THROW(r.run(g, g.attention_tokens(qt, kt, vt, it, 0.25f)), BackendError);
}

// A paged cache (graph/ops.h) gives the bits of the planes it was scattered from: each plane's
// slots go to blocks of a shared pool in a shuffled order, and the same tokens attend through
// their block tables; prompts and lone decode tokens, a window, a ring, blocks smaller and
// larger than the score tiles, spans past one decode run. A table that points past the pool is
// an error, not a read past it.
TEST_P(CpuOps, PagedCacheGivesThePlanesBits) {
  Runner r(GetParam());
  const int64_t hd = 32, n_head = 4, n_kv = 2;
  struct Case {
    int64_t slots, planes, block;
    std::vector<int32_t> info;  // (position, plane) per token
    int32_t window;
  };
  const Case cases[] = {
      {48, 3, 8, {0, 1, 9, 0, 10, 0, 11, 0, 30, 2, 31, 2}, 0},
      {48, 3, 4, {5, 2, 6, 2, 7, 2, 47, 0}, 0},
      {9, 2, 3, {22, 1, 23, 1, 8, 0}, 4},
      {320, 2, 64, {300, 1, 130, 0}, 0},
      {320, 2, 16, {319, 0, 200, 1, 201, 1}, 100},
  };
  for (const Case& c : cases) {
    const int64_t T = int64_t(c.info.size() / 2), row = hd * n_kv;
    const int64_t per_plane = (c.slots + c.block - 1) / c.block,
                  cells = per_plane * c.planes * c.block;
    auto q = random_floats(size_t(hd * n_head * T), 41);
    auto kf = random_floats(size_t(row * c.slots * c.planes), 42);
    auto vf = random_floats(size_t(row * c.slots * c.planes), 43);
    std::vector<uint16_t> k(kf.size()), v(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) k[i] = f32_to_fp16(kf[i]), v[i] = f32_to_fp16(vf[i]);
    // Blocks of every plane in a shuffled order over the pool.
    std::vector<int32_t> order(size_t(per_plane * c.planes));
    for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
    std::mt19937 rng(7);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<uint16_t> kp(size_t(row * cells), 0x7e00), vp(size_t(row * cells), 0x7e00);  // NaN
    std::vector<int32_t> info = {int32_t(c.slots), int32_t(c.block)};
    for (int64_t t = 0; t < T; ++t) info.push_back(c.info[size_t(2 * t)]), info.push_back(0);
    std::vector<int32_t> table_at(size_t(c.planes));
    for (int64_t pl = 0; pl < c.planes; ++pl) {
      table_at[size_t(pl)] = int32_t(info.size());
      for (int64_t b = 0; b < per_plane; ++b) info.push_back(order[size_t(pl * per_plane + b)]);
      for (int64_t j = 0; j < c.slots; ++j) {
        const int64_t cell =
            int64_t(order[size_t(pl * per_plane + j / c.block)]) * c.block + j % c.block;
        std::copy_n(&k[size_t((pl * c.slots + j) * row)], row, &kp[size_t(cell * row)]);
        std::copy_n(&v[size_t((pl * c.slots + j) * row)], row, &vp[size_t(cell * row)]);
      }
    }
    for (int64_t t = 0; t < T; ++t)
      info[size_t(3 + 2 * t)] = table_at[size_t(c.info[size_t(2 * t + 1)])];
    std::vector<int32_t> plane_info = c.info;
    Graph g1, g2;
    auto planes = r.run(
        g1, g1.attention_tokens(g1.leaf("q", DType::F32, {hd, n_head, T, 1}, q.data()),
                                g1.leaf("k", DType::F16, {hd, n_kv, c.slots, c.planes}, k.data()),
                                g1.leaf("v", DType::F16, {hd, n_kv, c.slots, c.planes}, v.data()),
                                g1.leaf("info", DType::I32, {2, T, 1, 1}, plane_info.data()), 0.3f,
                                c.window));
    auto paged =
        r.run(g2, g2.attention_paged(
                      g2.leaf("q", DType::F32, {hd, n_head, T, 1}, q.data()),
                      g2.leaf("k", DType::F16, {hd, n_kv, cells, 1}, kp.data()),
                      g2.leaf("v", DType::F16, {hd, n_kv, cells, 1}, vp.data()),
                      g2.leaf("info", DType::I32, {int64_t(info.size()), 1, 1, 1}, info.data()),
                      0.3f, c.window));
    ASSERT_EQ(planes.size(), paged.size());
    for (size_t i = 0; i < planes.size(); ++i)
      ASSERT_EQ(planes[i], paged[i]) << "slots " << c.slots << " block " << c.block << " at " << i;
    // A block number past the pool.
    std::vector<int32_t> bad = info;
    bad[size_t(table_at[0])] = int32_t(cells / c.block);
    Graph g3;
    EXPECT_THROW(
        r.run(g3, g3.attention_paged(
                      g3.leaf("q", DType::F32, {hd, n_head, T, 1}, q.data()),
                      g3.leaf("k", DType::F16, {hd, n_kv, cells, 1}, kp.data()),
                      g3.leaf("v", DType::F16, {hd, n_kv, cells, 1}, vp.data()),
                      g3.leaf("info", DType::I32, {int64_t(bad.size()), 1, 1, 1}, bad.data()), 0.3f,
                      c.window)),
        BackendError);
  }
}

// Decoding one token over long spans of the cache, across a ring's wrap and with windows,
// against the reference; and the same bits with 1, 2 and 3 threads, which split the runs of
// positions into pieces of heads differently: whole groups of cache heads, or some heads of one
// group (with one cache head, the only split there is).
TEST(CpuAttention, DecodeOverLongSpansMatchesTheReferenceWhateverTheThreads) {
  Runner one(1), two(2), three(3);
  struct Case {
    int32_t n_past, window;
    int64_t slots;  // the cache's positions; a ring when the window is set
  };
  struct Heads {
    int64_t n_head, n_kv;
  };
  for (const Heads& heads : {Heads{8, 2}, Heads{6, 1}})
    for (const Case& c : {Case{0, 0, 8}, Case{31, 0, 40}, Case{32, 0, 40}, Case{95, 0, 100},
                          Case{300, 0, 301}, Case{200, 70, 70}, Case{203, 45, 45}}) {
      const int64_t hd = 40, n_head = heads.n_head, n_kv = heads.n_kv;
      SCOPED_TRACE("heads " + std::to_string(n_head) + "/" + std::to_string(n_kv) + ", n_past " +
                   std::to_string(c.n_past) + ", window " + std::to_string(c.window));
      const int64_t end = c.n_past + 1, slots = c.slots;
      const int64_t first = c.window > 0 ? std::max<int64_t>(0, end - c.window) : 0;
      auto q = random_floats(size_t(hd * n_head), 41);
      auto kf = random_floats(size_t(hd * n_kv * slots), 42, 2.0f);
      auto vf = random_floats(size_t(hd * n_kv * slots), 43);
      std::vector<uint16_t> k(kf.size()), v(vf.size());
      for (size_t i = 0; i < kf.size(); ++i) k[i] = f32_to_fp16(kf[i]), v[i] = f32_to_fp16(vf[i]);
      const float scale = 0.2f;
      // With sinks, the runs' partial softmaxes are merged before the sink joins: one far above
      // the scores, the others of their size.
      auto sinks = random_floats(size_t(n_head), 44, 2.0f);
      sinks[1] = 30.0f;
      for (bool with_sinks : {false, true}) {
        SCOPED_TRACE(with_sinks ? "sinks" : "no sinks");
        const auto run = [&](Runner& r) {
          Graph g;
          Tensor* qt = g.leaf("q", DType::F32, {hd, n_head, 1, 1}, q.data());
          Tensor* kt = g.leaf("k", DType::F16, {hd, n_kv, slots, 1}, k.data());
          Tensor* vt = g.leaf("v", DType::F16, {hd, n_kv, slots, 1}, v.data());
          Tensor* st =
              with_sinks ? g.leaf("sinks", DType::F32, {n_head, 1, 1, 1}, sinks.data()) : nullptr;
          return r.run(g, g.attention(qt, kt, vt, c.n_past, scale, c.window, st));
        };
        const std::vector<float> got = run(one);
        for (int64_t h = 0; h < n_head; ++h) {
          const int64_t kvh = h / (n_head / n_kv);
          const auto at = [&](int64_t j, int64_t i) {
            return size_t(((j % slots) * n_kv + kvh) * hd + i);
          };
          ASSERT_NO_FATAL_FAILURE(
              expect_row_matches_reference(got, q, k, v, h, hd, first, end, scale, at,
                                           with_sinks ? double(sinks[size_t(h)]) : -INFINITY))
              << "head " << h;
        }
        EXPECT_EQ(got, run(two));
        EXPECT_EQ(got, run(three));
      }
    }
}

TEST_P(CpuOps, CopyConvertsIntoAStridedView) {
  Runner r(GetParam());
  const int64_t n = 64, rows = 3, dst_rows = 8;
  auto x = random_floats(size_t(n * rows), 16);
  for (DType t : {DType::F16, DType::F32, DType::BF16, DType::Q8_0}) {
    std::vector<uint8_t> dst(row_bytes(t, n) * dst_rows, 0xAB);
    Graph g;
    Tensor* src = g.leaf("x", DType::F32, {n, rows, 1, 1}, x.data());
    Tensor* d = g.leaf("cache", t, {n, dst_rows, 1, 1}, dst.data());
    Tensor* slot = g.view(d, {n, rows, 1, 1}, d->nb, 2 * d->nb[1]);
    Tensor* c = g.copy(src, slot);
    Scheduler s({r.device.get()}, true);
    s.run(g, {c});
    for (int64_t i = 0; i < rows; ++i) {
      std::vector<uint8_t> expect(row_bytes(t, n));
      quantize_row(t, x.data() + i * n, expect.data(), n);
      ASSERT_EQ(0,
                std::memcmp(expect.data(), dst.data() + (i + 2) * row_bytes(t, n), expect.size()))
          << dtype_name(t);
    }
    EXPECT_EQ(dst[0], 0xAB);  // rows outside the view are untouched
    EXPECT_EQ(dst.back(), 0xAB);
  }
}

// POLYSTACK_PROFILE_OPS=1: the device prints each op kind's calls and time when it is closed;
// without it, nothing.
TEST(CpuProfile, PrintsEachOpKindWhenTheDeviceCloses) {
  const int64_t n = 300;
  auto x = random_floats(size_t(n * 2), 18);
  auto w = random_floats(size_t(n), 19);
  const auto run_once = [&] {
    Runner r(2);
    for (int i = 0; i < 3; ++i) {
      Graph g;
      Tensor* xt = g.leaf("x", DType::F32, {n, 2, 1, 1}, x.data());
      Tensor* wt = g.leaf("w", DType::F32, {n, 1, 1, 1}, w.data());
      r.run(g, g.silu(g.mul(g.rms_norm(xt, 1e-5f), wt)));
    }
  };
  const char* old = std::getenv("POLYSTACK_PROFILE_OPS");
  const std::string saved = old ? old : "";
  setenv("POLYSTACK_PROFILE_OPS", "1", 1);
  testing::internal::CaptureStderr();
  run_once();
  const std::string printed = testing::internal::GetCapturedStderr();
  unsetenv("POLYSTACK_PROFILE_OPS");
  testing::internal::CaptureStderr();
  run_once();
  const std::string quiet = testing::internal::GetCapturedStderr();
  if (old) setenv("POLYSTACK_PROFILE_OPS", saved.c_str(), 1);
  for (const char* op : {"rms_norm", "mul", "silu"}) {
    const size_t at = printed.find(fmt::format("polystack: cpu op {:<10}", op));
    ASSERT_NE(at, std::string::npos) << op << " missing from:\n" << printed;
    EXPECT_NE(printed.substr(at, printed.find('\n', at) - at).find(" 3 calls "), std::string::npos)
        << printed;
  }
  EXPECT_EQ(printed.find("matmul"), std::string::npos) << "an op that never ran:\n" << printed;
  EXPECT_EQ(quiet, "");
}

TEST(Scheduler, ReusesMemoryOfDeadIntermediates) {
  Runner r(1);
  const int64_t n = 1024;
  auto x = random_floats(size_t(n), 17);
  Graph g;
  Tensor* t = g.leaf("x", DType::F32, {n, 1, 1, 1}, x.data());
  for (int i = 0; i < 20; ++i) t = g.silu(t);
  Scheduler s({r.device.get()}, true);
  s.run(g, {t});
  // A chain needs two live buffers at a time, not twenty.
  EXPECT_LE(s.arena_bytes(), size_t(3 * n * 4));
  double v = x[5];
  for (int i = 0; i < 20; ++i) v = v / (1 + std::exp(-v));
  EXPECT_NEAR(static_cast<float*>(t->data)[5], v, 1e-5);
}

// Three chains of different widths, interleaved, each step reading the chain's value from one
// to three steps back, so that intermediates of several sizes are alive at once and die in an
// irregular order: no two of them that are alive together may share a byte, and every value
// must come out as computed directly.
TEST(Scheduler, LiveIntermediatesNeverShareBytes) {
  Runner r(1);
  const int64_t widths[3] = {64, 200, 1000};
  std::vector<std::vector<float>> inputs;
  Graph g;
  std::vector<std::vector<Tensor*>> chain(3);
  std::vector<std::vector<std::vector<float>>> expect(3);
  for (int c = 0; c < 3; ++c) {
    inputs.push_back(random_floats(size_t(widths[c]), 40 + c));
    chain[size_t(c)].push_back(
        g.leaf(fmt::format("x{}", c), DType::F32, {widths[c], 1, 1, 1}, inputs.back().data()));
    expect[size_t(c)].push_back(inputs.back());
  }
  uint32_t state = 12345;
  const auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (int step = 0; step < 60; ++step) {
    const size_t c = next() % 3;
    auto& ts = chain[c];
    auto& vs = expect[c];
    const size_t back = std::min<size_t>(ts.size(), 1 + next() % 3);
    Tensor* a = ts.back();
    Tensor* b = ts[ts.size() - back];
    std::vector<float> v(vs.back().size());
    const std::vector<float>&va = vs.back(), &vb = vs[vs.size() - back];
    switch (next() % 3) {
      case 0:
        ts.push_back(g.add(a, b));
        for (size_t i = 0; i < v.size(); ++i) v[i] = va[i] + vb[i];
        break;
      case 1:
        ts.push_back(g.mul(a, b));
        for (size_t i = 0; i < v.size(); ++i) v[i] = va[i] * vb[i];
        break;
      default:
        ts.push_back(g.scale(a, 0.5f));
        for (size_t i = 0; i < v.size(); ++i) v[i] = va[i] * 0.5f;
        break;
    }
    vs.push_back(std::move(v));
  }
  std::vector<Tensor*> outputs;
  for (auto& ts : chain) outputs.push_back(ts.back());
  Scheduler s({r.device.get()}, true);
  s.run(g, outputs);

  const auto& nodes = g.nodes();
  std::map<const Tensor*, size_t> last;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Tensor* src : nodes[i]->src)
      if (src) last[src] = i;
  for (const Tensor* o : outputs) last[o] = nodes.size();
  for (size_t i = 0; i < nodes.size(); ++i)
    for (size_t j = i + 1; j < nodes.size() && j <= (last.count(nodes[i]) ? last[nodes[i]] : i);
         ++j) {
      const char* a = static_cast<const char*>(nodes[i]->data);
      const char* b = static_cast<const char*>(nodes[j]->data);
      EXPECT_TRUE(a + nodes[i]->n_bytes() <= b || b + nodes[j]->n_bytes() <= a)
          << nodes[i]->name << " is still to be read when " << nodes[j]->name
          << " is written over it";
    }
  for (int c = 0; c < 3; ++c) {
    const float* got = static_cast<const float*>(outputs[size_t(c)]->data);
    const std::vector<float>& want = expect[size_t(c)].back();
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5f * (1 + std::fabs(want[i]))) << "chain " << c << " " << i;
  }
}

// A device "with its own memory" that runs on the CPU backend: it counts the bytes written
// into its buffers, so a test sees when the scheduler copies leaves in.
class OwnMemoryDevice final : public Device {
 public:
  OwnMemoryDevice() : cpu_(Registry::global().open("cpu", DeviceOptions{})) {}
  const DeviceInfo& info() const override { return cpu_->info(); }
  std::string unsupported_reason(const Tensor& n) const override {
    if (n.op == refused) return "refused by the test";
    return cpu_->unsupported_reason(n);
  }
  bool reads_host_memory() const override { return false; }
  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    auto b = std::make_unique<Counted>(cpu_->alloc(bytes), written);
    buffers_.push_back(b.get());
    return b;
  }
  bool owns(const void* data) const override {
    for (Counted* b : buffers_) {
      const char* base = static_cast<const char*>(b->host_ptr());
      if (data >= base && data < base + b->size()) return true;
    }
    return false;
  }
  void execute(std::span<Tensor* const> nodes) override { cpu_->execute(nodes); }
  void synchronize() override { cpu_->synchronize(); }
  size_t written = 0;
  OpKind refused = OpKind::Count;  // an op this device says it cannot run

 private:
  struct Counted final : Buffer {
    Counted(std::unique_ptr<Buffer> b, size_t& n) : inner(std::move(b)), count(n) {}
    size_t size() const override { return inner->size(); }
    void* host_ptr() override { return inner->host_ptr(); }
    void write(size_t offset, const void* src, size_t n) override {
      count += n;
      inner->write(offset, src, n);
    }
    void read(size_t offset, void* dst, size_t n) const override { inner->read(offset, dst, n); }
    std::unique_ptr<Buffer> inner;
    size_t& count;
  };
  std::unique_ptr<Device> cpu_;
  std::vector<Counted*> buffers_;  // buffers live as long as the scheduler, which the test outlives
};

TEST(Scheduler, KeepsATransferredTensorUntilItsReaderElsewhereHasRun) {
  // silu falls back to the CPU; both results go to the other device's add. The second silu
  // runs before either is copied over, so it must not be given the first one's bytes.
  OwnMemoryDevice dev;
  dev.refused = OpKind::Silu;
  auto cpu = Registry::global().open("cpu", DeviceOptions{});
  const int64_t n = 300;
  auto a = random_floats(size_t(n), 5), b = random_floats(size_t(n), 6);
  Graph g;
  Tensor* at = g.leaf("a", DType::F32, {n, 1, 1, 1}, a.data());
  Tensor* bt = g.leaf("b", DType::F32, {n, 1, 1, 1}, b.data());
  Tensor* sum = g.add(g.silu(g.scale(at, 1.5f)), g.silu(g.scale(bt, 0.5f)));
  Scheduler s({&dev, cpu.get()}, false);
  s.run(g, {sum});
  std::vector<float> got(static_cast<size_t>(n));
  s.read(*sum, got.data());
  for (int64_t i = 0; i < n; ++i) {
    const double x = 1.5 * a[size_t(i)], y = 0.5 * b[size_t(i)];
    ASSERT_NEAR(got[size_t(i)], x / (1 + std::exp(-x)) + y / (1 + std::exp(-y)), 1e-5) << i;
  }
}

TEST(Scheduler, UploadsConstantLeavesOnceAndInputsEveryRun) {
  OwnMemoryDevice dev;
  const int64_t k = 64, n = 16;
  auto w = random_floats(size_t(k * n), 3);
  auto x = random_floats(size_t(k), 4);
  Graph g;
  Tensor* wt = g.leaf("w", DType::F32, {k, n, 1, 1}, w.data());
  wt->constant = true;
  Tensor* xt = g.leaf("x", DType::F32, {k, 1, 1, 1}, x.data());
  Tensor* y = g.matmul(wt, xt);
  Scheduler s({&dev}, true);
  s.upload_constants(g);
  EXPECT_EQ(dev.written, w.size() * 4) << "the weights, and only they, before any run";
  s.run(g, {y});
  EXPECT_EQ(dev.written, (w.size() + x.size()) * 4) << "the first run copies only the input";
  std::vector<float> got(static_cast<size_t>(n));
  s.read(*y, got.data());
  for (int64_t r = 0; r < n; ++r) {
    double e = 0;
    for (int64_t i = 0; i < k; ++i) e += double(w[size_t(r * k + i)]) * x[size_t(i)];
    EXPECT_NEAR(got[size_t(r)], e, 1e-4) << r;
  }
}

}  // namespace
}  // namespace ps
