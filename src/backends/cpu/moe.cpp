// Mixture-of-experts ops (graph/ops.h): choosing experts per token, their weights, the matmul
// over the chosen experts only, and the weighted sum of their outputs.
//
// matmul_id groups the (token, slot) pairs by expert and runs one ordinary matmul per expert
// that has any: a prompt's tokens that chose expert e are gathered into one activation matrix,
// so each expert's weights are read once per batch and go through the same register-tiled and
// packed kernels as a dense layer's; decode reads only the k chosen experts' bytes.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/error.h"
#include "graph/ops.h"

namespace ps::cpu {
namespace {

// A total order for ranking: NaN below every number, so that a row holding NaN still yields k
// distinct indices.
inline bool ranks_above(float a, int64_t ia, float b, int64_t ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na || nb) return (!na && nb) || (na && nb && ia < ib);
  return a > b || (a == b && ia < ib);
}

const float* f32_row(const Tensor& t, int64_t i1, int64_t i2 = 0) {
  return reinterpret_cast<const float*>(row_ptr(t, i1, i2));
}

const int32_t* i32_row(const Tensor& t, int64_t i1) {
  return reinterpret_cast<const int32_t*>(row_ptr(t, i1));
}

void check_ids(const Tensor& ids, int64_t n_experts, const char* op) {
  for (int64_t t = 0; t < ids.ne[1]; ++t) {
    const int32_t* row = i32_row(ids, t);
    for (int64_t j = 0; j < ids.ne[0]; ++j)
      if (row[j] < 0 || row[j] >= n_experts)
        throw BackendError(fmt::format("cpu {}: expert id {} of token {} is outside [0, {})", op,
                                       row[j], t, n_experts));
  }
}

}  // namespace

void top_k(Context& ctx, Tensor& node) {
  const Tensor& x = *node.src[0];
  const int64_t n = x.ne[0], k = top_k_params(node).k;
  if (k < 1 || k > n || node.ne[0] != k)
    throw BackendError(fmt::format("cpu top_k: k = {} of rows of {}", k, n));
  ctx.pool->parallel_for(x.ne[1], [&](int64_t r, int) {
    const float* v = f32_row(x, r);
    int32_t* out = reinterpret_cast<int32_t*>(row_ptr(node, r));
    // ranks_above is a total order, so a partial sort of the indices is exact: O(n log k)
    // whatever a file declares.
    thread_local std::vector<int32_t> idx;
    idx.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = int32_t(i);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return ranks_above(v[a], a, v[b], b); });
    std::copy(idx.begin(), idx.begin() + k, out);
  });
}

void expert_weights(Context& ctx, Tensor& node) {
  const Tensor& logits = *node.src[0];
  const Tensor& ids = *node.src[1];
  const ExpertWeightsParams p = expert_weights_params(node);
  const int64_t E = logits.ne[0], k = ids.ne[0];
  check_ids(ids, E, "expert_weights");
  ctx.pool->parallel_for(ids.ne[1], [&](int64_t t, int) {
    const float* z = f32_row(logits, t);
    const int32_t* id = i32_row(ids, t);
    float* w = reinterpret_cast<float*>(row_ptr(node, t));
    switch (p.gating) {
      case ExpertGating::Softmax: {
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t e = 0; e < E; ++e) mx = std::max(mx, z[e]);
        double sum = 0;
        for (int64_t e = 0; e < E; ++e) sum += std::exp(z[e] - mx);
        for (int64_t j = 0; j < k; ++j) w[j] = float(std::exp(z[id[j]] - mx) / sum);
        break;
      }
      case ExpertGating::Sigmoid:
        for (int64_t j = 0; j < k; ++j) w[j] = 1.0f / (1.0f + std::exp(-z[id[j]]));
        break;
      case ExpertGating::SoftmaxSelected: {
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < k; ++j) mx = std::max(mx, z[id[j]]);
        double sum = 0;
        for (int64_t j = 0; j < k; ++j) sum += std::exp(z[id[j]] - mx);
        for (int64_t j = 0; j < k; ++j) w[j] = float(std::exp(z[id[j]] - mx) / sum);
        break;
      }
    }
    if (p.normalize) {
      float sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += w[j];
      for (int64_t j = 0; j < k; ++j) w[j] /= sum;
    }
    if (p.scale != 1.0f)
      for (int64_t j = 0; j < k; ++j) w[j] *= p.scale;
  });
}

void matmul_id(Context& ctx, Tensor& node) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const Tensor& ids = *node.src[2];
  const int64_t K = w.ne[0], N = w.ne[1], E = w.ne[2], k = ids.ne[0], T = ids.ne[1];
  const bool shared_input = x.ne[1] == 1;
  if (x.nb[0] != sizeof(float) || node.nb[0] != sizeof(float))
    throw BackendError(
        fmt::format("cpu matmul_id: {} or its output is not in contiguous rows", x.name));
  check_ids(ids, E, "matmul_id");

  // The (slot, token) pairs of each expert, in token order.
  auto& order = ctx.expert_order;
  auto& first = ctx.expert_first;
  first.assign(size_t(E) + 1, 0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) ++first[size_t(i32_row(ids, t)[j]) + 1];
  for (int64_t e = 0; e < E; ++e) first[size_t(e) + 1] += first[size_t(e)];
  order.resize(size_t(k * T));
  auto& next = ctx.expert_next;
  next.assign(first.begin(), first.end() - 1);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) order[size_t(next[size_t(i32_row(ids, t)[j])]++)] = j + k * t;

  for (int64_t e = 0; e < E; ++e) {
    const int64_t begin = first[size_t(e)], m = first[size_t(e) + 1] - begin;
    if (m == 0) continue;
    // The expert's weights as a 2-D matrix over the same bytes: constant weights keep their
    // packed copy per expert.
    Tensor we = w;
    we.ne = {K, N, 1, 1};
    we.nb[2] = we.nb[3] = w.nb[1] * size_t(N);
    we.data = static_cast<char*>(w.data) + size_t(e) * w.nb[2];
    // Its tokens' activations gathered into one matrix, and the products scattered back.
    ctx.gather_x.resize(size_t(K * m));
    ctx.gather_y.resize(size_t(N * m));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t pair = order[size_t(begin + i)], j = pair % k, t = pair / k;
      std::memcpy(&ctx.gather_x[size_t(i * K)], f32_row(x, shared_input ? 0 : j, t),
                  size_t(K) * sizeof(float));
    }
    Tensor xe;
    xe.type = DType::F32;
    xe.ne = {K, m, 1, 1};
    xe.set_contiguous_strides();
    xe.data = ctx.gather_x.data();
    Tensor ye;
    ye.op = OpKind::MatMul;
    ye.type = DType::F32;
    ye.ne = {N, m, 1, 1};
    ye.set_contiguous_strides();
    ye.data = ctx.gather_y.data();
    ye.src = {&we, &xe, nullptr, nullptr};
    matmul(ctx, ye);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t pair = order[size_t(begin + i)], j = pair % k, t = pair / k;
      std::memcpy(row_ptr(node, j, t), &ctx.gather_y[size_t(i * N)], size_t(N) * sizeof(float));
    }
  }
}

void expert_sum(Context& ctx, Tensor& node) {
  const Tensor& x = *node.src[0];
  const Tensor& wts = *node.src[1];
  const int64_t n = x.ne[0], k = x.ne[1];
  ctx.pool->parallel_for(x.ne[2], [&](int64_t t, int) {
    const float* w = f32_row(wts, t);
    float* out = reinterpret_cast<float*>(row_ptr(node, t));
    const float* x0 = f32_row(x, 0, t);
    for (int64_t i = 0; i < n; ++i) out[i] = x0[i] * w[0];
    for (int64_t j = 1; j < k; ++j) {
      const float* xj = f32_row(x, j, t);
      for (int64_t i = 0; i < n; ++i) out[i] += xj[i] * w[j];
    }
  });
}

}  // namespace ps::cpu
