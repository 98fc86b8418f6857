// Causal attention for a batch of queries over the F16 KV cache, an exact softmax per (token,
// head). Grouped-query attention maps n_head / n_kv_head query heads onto each cache head; a
// sliding window limits each query to the last `window` positions, which a ring cache holds at
// slot position % slots.
//
// A task takes a block of queries that read the same cache rows: up to kQueriesPerTask of them,
// the heads of one cache head for a run of consecutive tokens of one sequence. Their scores
// come from the register-tiled matmul kernels (cache rows as weight rows, the queries as
// activation columns), so each K row is loaded and converted once for the block rather than
// once per query, with no horizontal sum per score; the weighted sum of V rows likewise
// converts each row once for every query of the block (DotKernel::weighted_sum). Positions a
// query may not see (later tokens of the block, or before its window) get probability 0.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/row_ops.h"
#include "backends/cpu/vec_dot.h"
#include "core/error.h"
#include "graph/ops.h"

namespace ps::cpu {
namespace {

// Queries of one task: enough that a K or V row serves many, few enough that their scores and
// sums stay in the L1 and L2 caches.
constexpr int64_t kQueriesPerTask = 16;
// Tasks per thread wanted before a block takes every head of its cache head.
constexpr int64_t kTasksPerThread = 2;

// Tokens [t0, t1) of one sequence (cache plane) at consecutive positions.
struct TokenBlock {
  int64_t t0, t1, plane;
};

}  // namespace

void attention(Context& ctx, Tensor& node) {
  const Tensor& q = *node.src[0];
  const Tensor& kc = *node.src[1];
  const Tensor& vc = *node.src[2];
  const int64_t hd = q.ne[0], n_head = q.ne[1], n_tokens = q.ne[2];
  const int64_t n_kv_head = kc.ne[1];
  const int64_t group = n_head / n_kv_head;
  const AttentionParams ap = attention_params(node);
  const int64_t window = ap.window;
  const int64_t slots = kc.ne[2];  // position j is in slot j % slots
  const float scale = ap.scale;
  // Per token: its position and cache plane (several sequences), else n_past + t in plane 0.
  const Tensor* info = attention_token_info(node);
  const int32_t* tok = info ? static_cast<const int32_t*>(info->data) : nullptr;
  const DotKernel& kdot = dot_kernel(kc.type, ctx.isa);
  const WeightedSumFn vsum = dot_kernel(vc.type, ctx.isa).weighted_sum;
  if (kdot.act_type != DType::F32 || !vsum)
    throw BackendError(
        fmt::format("cpu attention: K cache {} ({}) or V cache {} ({}) is not of a "
                    "float type",
                    kc.name, dtype_name(kc.type), vc.name, dtype_name(vc.type)));
  const GemmKernel* tiles = gemm_kernel(kc.type, ctx.isa);
  const RowOps& rows = row_ops(ctx.isa);

  if (tok)
    for (int64_t t = 0; t < n_tokens; ++t)
      if (tok[2 * t] < 0 || tok[2 * t + 1] < 0 || tok[2 * t + 1] >= kc.ne[3] ||
          tok[2 * t + 1] >= vc.ne[3])
        throw BackendError(fmt::format("cpu attention: token {} has position {} in plane {} of {}",
                                       t, tok[2 * t], tok[2 * t + 1], kc.ne[3]));
  const auto position = [&](int64_t t) { return tok ? int64_t(tok[2 * t]) : ap.n_past + t; };
  const auto plane_of = [&](int64_t t) { return tok ? int64_t(tok[2 * t + 1]) : int64_t(0); };

  // Tokens per block follow from the group alone, so a token's block (and so the order of its
  // sums) does not depend on how many threads there are.
  const int64_t block_tokens = std::max<int64_t>(1, kQueriesPerTask / group);
  std::vector<TokenBlock> blocks;
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (blocks.empty() || t - blocks.back().t0 == block_tokens ||
        plane_of(t) != blocks.back().plane || position(t) != position(t - 1) + 1)
      blocks.push_back({t, t, plane_of(t)});
    blocks.back().t1 = t + 1;
  }
  // Heads per task: the whole group, unless that leaves threads idle (decode of a model with
  // few cache heads); then the largest divisor of the group that makes enough tasks.
  const int64_t want = int64_t(ctx.pool->size()) * kTasksPerThread;
  int64_t heads = group;
  while (heads > 1 && int64_t(blocks.size()) * n_kv_head * (group / heads) < want) {
    int64_t d = heads - 1;
    while (group % d != 0) --d;
    heads = d;
  }
  const int64_t subgroups = group / heads;

  ctx.pool->parallel_for(int64_t(blocks.size()) * n_kv_head * subgroups, [&](int64_t task, int) {
    const TokenBlock& b = blocks[size_t(task / (n_kv_head * subgroups))];
    const int64_t kvh = task / subgroups % n_kv_head;
    const int64_t h0 = kvh * group + task % subgroups * heads;
    // Query i is token b.t0 + i / heads of head h0 + i % heads.
    const int nq = int((b.t1 - b.t0) * heads);
    // Visible cache positions of the block: [lo, hi); of query i: [first(i), end(i)).
    const auto end = [&](int i) { return position(b.t0 + i / heads) + 1; };
    const auto first = [&](int i) {
      return window > 0 ? std::max<int64_t>(0, end(i) - window) : int64_t(0);
    };
    const int64_t lo = first(0), hi = end(nq - 1), span = hi - lo;

    thread_local std::vector<float> queries, scores, sums, inv;
    thread_local std::vector<char> gathered;
    queries.resize(size_t(nq * hd));
    scores.resize(size_t(nq * span));
    sums.resize(size_t(nq * hd));
    for (int i = 0; i < nq; ++i)
      std::memcpy(&queries[size_t(i * hd)], row_ptr(q, h0 + i % heads, b.t0 + i / heads),
                  size_t(hd) * sizeof(float));

    // Scores by groups of the tile's rows at positions that are multiples of its row count, so
    // a score is computed the same way whatever block or ring layout it is reached through; a
    // group split by the ring's wrap is gathered into consecutive rows first. Positions outside
    // whole groups take the row dot.
    const size_t k_stride = kc.nb[2], v_stride = vc.nb[2];
    const size_t k_row_bytes = size_t(hd) * kc.nb[0];
    const auto k_row = [&](int64_t j) {
      return static_cast<const char*>(row_ptr(kc, kvh, j % slots, b.plane));
    };
    const int64_t R = tiles ? tiles->rows : 1;
    for (int64_t j = lo; j < hi;) {
      if (!tiles || j % R != 0 || j + R > hi) {
        for (int i = 0; i < nq; ++i)
          scores[size_t(i) * size_t(span) + size_t(j - lo)] =
              kdot.dot(hd, k_row(j), &queries[size_t(i * hd)]);
        ++j;
        continue;
      }
      const char* w = k_row(j);
      size_t w_stride = k_stride;
      if (j % slots + R > slots) {
        gathered.resize(size_t(R) * k_row_bytes);
        for (int64_t r = 0; r < R; ++r)
          std::memcpy(&gathered[size_t(r) * k_row_bytes], k_row(j + r), k_row_bytes);
        w = gathered.data();
        w_stride = k_row_bytes;
      }
      for (int i = 0; i < nq; i += tiles->cols) {
        const int width = std::min(tiles->cols, nq - i);
        tiles->tiles[width - 1](hd, w, w_stride, &queries[size_t(i * hd)],
                                size_t(hd) * sizeof(float),
                                &scores[size_t(i) * size_t(span) + size_t(j - lo)], size_t(span));
      }
      j += R;
    }

    inv.resize(size_t(nq));
    for (int i = 0; i < nq; ++i) {
      float* p = scores.data() + size_t(i) * size_t(span);
      const int64_t f = first(i) - lo, e = end(i) - lo;
      float mx = -INFINITY;
      for (int64_t j = f; j < e; ++j) mx = std::max(mx, p[j] * scale);
      std::fill(p, p + f, 0.0f);
      std::fill(p + e, p + span, 0.0f);
      inv[size_t(i)] = float(1.0 / rows.exp_sum(p + f, scale, mx, p + f, e - f));
    }

    // V rows in position order; a ring's wrap splits them into two calls that continue the
    // same sums.
    std::fill(sums.begin(), sums.end(), 0.0f);
    for (int64_t a = lo; a < hi;) {
      const int64_t c = std::min(hi, a + slots - a % slots);
      vsum(hd, c - a, &scores[size_t(a - lo)], size_t(span), nq,
           row_ptr(vc, kvh, a % slots, b.plane), v_stride, sums.data(), size_t(hd));
      a = c;
    }

    for (int i = 0; i < nq; ++i) {
      float* out = reinterpret_cast<float*>(row_ptr(node, h0 + i % heads, b.t0 + i / heads));
      for (int64_t d = 0; d < hd; ++d) out[d] = sums[size_t(i * hd + d)] * inv[size_t(i)];
    }
  });
}

}  // namespace ps::cpu
