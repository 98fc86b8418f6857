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
//
// Decoding (one token per block) splits the positions instead: see the decode path below.
// Attention sinks (graph/ops.h) add a term to each query's softmax denominator.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
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
// Cache positions per task when decoding (one token per block): a run's K and V rows of every
// cache head, read in address order.
constexpr int64_t kDecodeRun = 64;
// Positions a decode task scores (then sums) for every cache head before the next ones, and
// the bytes it asks for ahead of those it reads.
constexpr int64_t kDecodeChunk = 8;
constexpr size_t kDecodeLead = size_t(8) << 10;
// Tasks per thread wanted before a block takes every head of its cache head.
constexpr int64_t kTasksPerThread = 2;

// Byte ranges a task will read, in the order it reads them, asked for (prefetched into the L2
// cache) a piece at a time: take(n) asks for the next n bytes, so a task that takes what it is
// about to read, after a first lead, keeps that lead ahead of its reads. A range is `rows` pieces
// of `bytes` bytes, `stride` bytes apart (a task's cache heads in each position's row).
class Ahead {
 public:
  void add(const char* p, int64_t rows, size_t bytes, size_t stride) {
    if (bytes == stride) bytes *= size_t(rows), rows = 1;  // whole rows: one stretch
    if (n_ < ranges_.size() && rows > 0 && bytes > 0) ranges_[n_++] = {p, rows, bytes, stride};
  }
  void take(size_t bytes) {
    while (bytes > 0 && i_ < n_) {
      const Range& r = ranges_[i_];
      const char* from = r.p + size_t(row_) * r.stride + done_;
      const size_t n = std::min(bytes, r.bytes - done_);
      const uintptr_t end = reinterpret_cast<uintptr_t>(from + n);
      for (uintptr_t a = reinterpret_cast<uintptr_t>(from) & ~uintptr_t(63); a < end; a += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(a), 0, 2);
      bytes -= n;
      done_ += n;
      if (done_ == r.bytes) {
        done_ = 0;
        if (++row_ == r.rows) ++i_, row_ = 0;
      }
    }
  }

 private:
  struct Range {
    const char* p;
    int64_t rows;
    size_t bytes, stride;
  };
  std::array<Range, 4> ranges_{};  // K and V, each split at most once by a ring's wrap
  size_t n_ = 0, i_ = 0, done_ = 0;
  int64_t row_ = 0;
};

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
  // Position j is in slot j % slots: the cache's row of that slot, or with a paged cache the
  // cell its sequence's block table gives (graph/ops.h).
  const bool paged = ap.paged;
  const Tensor* info = attention_token_info(node);
  const int32_t* all = info ? static_cast<const int32_t*>(info->data) : nullptr;
  int64_t slots = kc.ne[2], block = 1;
  if (paged) {
    slots = all[0];
    block = all[1];
    if (slots < 1 || block < 1 || kc.ne[2] % block != 0)
      throw BackendError(
          fmt::format("cpu attention: paged cache of {} cells with {} slots per "
                      "sequence in blocks of {}",
                      kc.ne[2], slots, block));
  }
  const float scale = ap.scale;
  // Sinks (graph/ops.h): head h's extra logit, folded into the denominator of its softmax as
  // exp(s_h - m) relative to the maximum m of its scores (exact where s_h exceeds m too: the
  // weights then sum to less than one, as the sink takes the rest).
  const Tensor* sinks_t = attention_sinks(node);
  const float* sinks = sinks_t ? static_cast<const float*>(sinks_t->data) : nullptr;
  const auto sink_term = [&](int64_t h, double max) {
    return sinks ? std::exp(double(sinks[h]) - max) : 0.0;
  };
  // Per token: its position and cache plane (several sequences) or block table (paged), else
  // n_past + t in plane 0.
  const int32_t* tok = paged ? all + kPagedHeader : all;
  const DotKernel& kdot = dot_kernel(kc.type, ctx.isa);
  const WeightedSumFn vsum = dot_kernel(vc.type, ctx.isa).weighted_sum;
  if (kdot.act_type != DType::F32 || !vsum)
    throw BackendError(
        fmt::format("cpu attention: K cache {} ({}) or V cache {} ({}) is not of a "
                    "float type",
                    kc.name, dtype_name(kc.type), vc.name, dtype_name(vc.type)));
  const GemmKernel* tiles = ctx.batch_invariant ? nullptr : gemm_kernel(kc.type, ctx.isa);
  const RowOps& rows = row_ops(ctx.isa);

  if (tok && !paged)
    for (int64_t t = 0; t < n_tokens; ++t)
      if (tok[2 * t] < 0 || tok[2 * t + 1] < 0 || tok[2 * t + 1] >= kc.ne[3] ||
          tok[2 * t + 1] >= vc.ne[3])
        throw BackendError(fmt::format("cpu attention: token {} has position {} in plane {} of {}",
                                       t, tok[2 * t], tok[2 * t + 1], kc.ne[3]));
  if (paged)
    // Every block a token's visible positions use must lie in the table and the pool.
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int64_t pos = tok[2 * t], table = tok[2 * t + 1];
      const int64_t entries = pos < 0 ? 0 : (std::min(slots, pos + 1) - 1) / block + 1;
      bool ok = pos >= 0 && table >= kPagedHeader + 2 * n_tokens && table + entries <= info->ne[0];
      for (int64_t e = 0; ok && e < entries; ++e)
        ok = all[table + e] >= 0 && (int64_t(all[table + e]) + 1) * block <= kc.ne[2];
      if (!ok)
        throw BackendError(fmt::format(
            "cpu attention: token {} at position {} has a block table outside the {} cells", t, pos,
            kc.ne[2]));
    }
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
  const auto visible_from = [&](int64_t end) {
    return window > 0 ? std::max<int64_t>(0, end - window) : int64_t(0);
  };

  const size_t k_stride = kc.nb[2], v_stride = vc.nb[2];
  const size_t k_row_bytes = size_t(hd) * kc.nb[0];
  const int64_t R = tiles ? tiles->rows : 1;
  // Scores of nq queries (rows hd floats apart) against cache head kvh's K rows at positions
  // [from, to) of a plane: scores[i * stride + j - from]. By groups of the tile's rows at
  // positions that are multiples of its row count, so a score is computed the same way whatever
  // block, run of positions or ring layout it is reached through; a group split by the ring's
  // wrap is gathered into consecutive rows first. Positions outside whole groups take the row
  // dot.
  // The row of position j of the sequence whose plane (paged: block table) is `plane`.
  const auto cache_row = [&](const Tensor& c, int64_t kvh, int64_t plane, int64_t j) {
    const int64_t slot = j % slots;
    if (!paged) return static_cast<const char*>(row_ptr(c, kvh, slot, plane));
    const int64_t cell = int64_t(all[plane + slot / block]) * block + slot % block;
    return static_cast<const char*>(row_ptr(c, kvh, cell, 0));
  };
  // The end of the run of positions from a (at most to) that lie in consecutive rows: up to a
  // ring's wrap, or a block's end.
  const auto run_end = [&](int64_t a, int64_t to) {
    const int64_t slot = a % slots;
    int64_t c = std::min(to, a + slots - slot);
    if (paged) c = std::min(c, a + block - slot % block);
    return c;
  };
  const auto score = [&](int64_t kvh, int64_t plane, int64_t from, int64_t to, const float* queries,
                         int nq, float* scores, size_t stride, std::vector<char>& gathered) {
    const auto k_row = [&](int64_t j) { return cache_row(kc, kvh, plane, j); };
    for (int64_t j = from; j < to;) {
      if (!tiles || j % R != 0 || j + R > to) {
        for (int i = 0; i < nq; ++i)
          scores[size_t(i) * stride + size_t(j - from)] =
              kdot.dot(hd, k_row(j), queries + size_t(i * hd));
        ++j;
        continue;
      }
      const char* w = k_row(j);
      size_t w_stride = k_stride;
      if (run_end(j, j + R) < j + R) {
        gathered.resize(size_t(R) * k_row_bytes);
        for (int64_t r = 0; r < R; ++r)
          std::memcpy(&gathered[size_t(r) * k_row_bytes], k_row(j + r), k_row_bytes);
        w = gathered.data();
        w_stride = k_row_bytes;
      }
      for (int i = 0; i < nq; i += tiles->cols) {
        const int width = std::min(tiles->cols, nq - i);
        tiles->tiles[width - 1](hd, w, w_stride, queries + size_t(i * hd),
                                size_t(hd) * sizeof(float),
                                scores + size_t(i) * stride + size_t(j - from), stride);
      }
      j += R;
    }
  };
  // Calls fn(a, c) for the runs [a, c) of positions [from, to) that lie in consecutive slots:
  // one, or two where a ring wraps.
  const auto slot_runs = [&](int64_t from, int64_t to, const auto& fn) {
    for (int64_t a = from; a < to;) {
      const int64_t c = run_end(a, to);
      fn(a, c);
      a = c;
    }
  };
  // sums[i * hd + d] += p[i * p_stride + j - from] * V[j][d] over positions [from, to), in
  // position order; a ring's wrap splits them into two calls that continue the same sums.
  const auto weigh = [&](int64_t kvh, int64_t plane, int64_t from, int64_t to, const float* p,
                         size_t p_stride, int nq, float* sums) {
    slot_runs(from, to, [&](int64_t a, int64_t c) {
      vsum(hd, c - a, p + (a - from), p_stride, nq, cache_row(vc, kvh, plane, a), v_stride, sums,
           size_t(hd));
    });
  };

  // Decoding (one token per block): a task takes a run of kDecodeRun positions of one block
  // (fewer where the block's span is short of two such runs: half the span, in whole chunks, so
  // that two threads share it) for every head, or where that still leaves threads idle, for a
  // piece of the heads: those of fewer cache heads, or fewer heads of one cache head's group.
  // A position's K (and V) rows of the task's heads lie together, so the run is one stretch of
  // memory (or one piece of each position's row), where one head's rows alone lie a whole cache
  // row apart and stream at a fraction of the bandwidth. The task reads it in chunks of
  // kDecodeChunk positions, every cache head's rows of a chunk before the next chunk's, so in
  // address order, and asks for the bytes kDecodeLead ahead of those it reads as it goes
  // (Ahead): asking for the whole run at the task's start stalled it until the run had
  // arrived, with nothing computed meanwhile. Each query gets a partial softmax over the run
  // (its maximum, its sum, its weighted V sum), the same whatever the piece of heads; the runs,
  // which follow from the span alone, are merged in position order, so the result does not
  // depend on the number of threads.
  std::vector<int64_t> first_run(blocks.size() + 1, 0), run_length(blocks.size());
  bool decode = !ctx.batch_invariant;
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    decode = decode && blocks[bi].t1 - blocks[bi].t0 == 1;
    const int64_t end = position(blocks[bi].t0) + 1, span = end - visible_from(end);
    const int64_t half = (span + 2 * kDecodeChunk - 1) / (2 * kDecodeChunk) * kDecodeChunk;
    run_length[bi] = std::clamp(half, kDecodeChunk, kDecodeRun);
    first_run[bi + 1] = first_run[bi] + (span + run_length[bi] - 1) / run_length[bi];
  }
  if (decode) {
    const int64_t runs = first_run.back();
    // Heads per task: the largest piece (whole groups of cache heads, else a divisor of one
    // group) that gives every thread a task. Pieces of rows share cache lines and the
    // prefetchers' streams, so they come second to runs of whole rows.
    const int64_t want = int64_t(ctx.pool->size());
    int64_t heads = n_head;
    const auto fits = [&](int64_t h) {
      return n_head % h == 0 && (h % group == 0 ? n_kv_head % (h / group) == 0 : group % h == 0);
    };
    while (heads > 1 && runs * (n_head / heads) < want) {
      int64_t h = heads - 1;
      while (!fits(h)) --h;
      heads = h;
    }
    const int64_t pieces = n_head / heads;
    // Per (run, head): the maximum, the sum and hd weighted sums.
    const size_t part = size_t(hd) + 2;
    std::vector<float> parts(size_t(runs) * size_t(n_head) * part);
    // Chunks of a run: the K (then V) rows of the task's cache heads for kDecodeChunk
    // positions, taken in address order while the bytes ahead are asked for. A chunk boundary
    // is a multiple of the tile's rows, so the scores are grouped as in `score` over the whole
    // run, and the V sums continue in position order: the same results.
    const int64_t chunk = kDecodeChunk % R == 0 ? kDecodeChunk : kDecodeRun;
    ctx.pool->parallel_for(runs * pieces, [&](int64_t task, int) {
      const int64_t run = task / pieces;
      const int64_t h0 = task % pieces * heads, h1 = h0 + heads;
      const int64_t kv0 = h0 / group, kv1 = (h1 - 1) / group + 1;
      const int64_t per_kv = std::min(heads, group);  // the task's heads of each cache head
      const size_t bi =
          size_t(std::upper_bound(first_run.begin(), first_run.end(), run) - first_run.begin() - 1);
      const TokenBlock& b = blocks[bi];
      const int64_t end = position(b.t0) + 1, lo = visible_from(end);
      const int64_t from = lo + (run - first_run[bi]) * run_length[bi];
      const int64_t to = std::min(end, from + run_length[bi]), n = to - from;
      Ahead ahead;
      for (const Tensor* cache : {&kc, &vc})
        slot_runs(from, to, [&](int64_t a, int64_t c) {
          ahead.add(cache_row(*cache, kv0, b.plane, a), c - a, size_t(kv1 - kv0) * cache->nb[1],
                    cache->nb[2]);
        });
      ahead.take(kDecodeLead);
      thread_local std::vector<float> queries, scores, sums;
      thread_local std::vector<char> gathered;
      queries.resize(size_t(heads * hd));
      scores.resize(size_t(heads * n));
      sums.resize(size_t(heads * hd));
      for (int64_t h = h0; h < h1; ++h)
        std::memcpy(&queries[size_t((h - h0) * hd)], row_ptr(q, h, b.t0),
                    size_t(hd) * sizeof(float));
      // fn(kvh, i, a, c): cache head kvh, whose heads start at the task's head h0 + i.
      const auto chunks = [&](const Tensor& cache, const auto& fn) {
        for (int64_t a = from; a < to;) {
          const int64_t c = std::min(to, (a / chunk + 1) * chunk);
          for (int64_t kvh = kv0; kvh < kv1; ++kvh) {
            ahead.take(size_t(c - a) * cache.nb[1]);
            fn(kvh, std::max(h0, kvh * group) - h0, a, c);
          }
          a = c;
        }
      };
      chunks(kc, [&](int64_t kvh, int64_t i, int64_t a, int64_t c) {
        score(kvh, b.plane, a, c, &queries[size_t(i * hd)], int(per_kv),
              &scores[size_t(i * n + (a - from))], size_t(n), gathered);
      });
      float* out = &parts[size_t(run) * size_t(n_head) * part];
      for (int64_t h = h0; h < h1; ++h) {
        float* p = &scores[size_t((h - h0) * n)];
        out[size_t(h) * part + 1] =
            float(softmax_exp(rows, p, scale, p, n, &out[size_t(h) * part]));
      }
      std::fill(sums.begin(), sums.end(), 0.0f);
      chunks(vc, [&](int64_t kvh, int64_t i, int64_t a, int64_t c) {
        weigh(kvh, b.plane, a, c, &scores[size_t(i * n + (a - from))], size_t(n), int(per_kv),
              &sums[size_t(i * hd)]);
      });
      for (int64_t h = h0; h < h1; ++h)
        std::memcpy(&out[size_t(h) * part + 2], &sums[size_t((h - h0) * hd)],
                    size_t(hd) * sizeof(float));
    });
    for (size_t bi = 0; bi < blocks.size(); ++bi)
      for (int64_t h = 0; h < n_head; ++h) {
        const auto at = [&](int64_t r) {
          return &parts[(size_t(r) * size_t(n_head) + size_t(h)) * part];
        };
        float mx = -INFINITY;
        for (int64_t r = first_run[bi]; r < first_run[bi + 1]; ++r) mx = std::max(mx, at(r)[0]);
        float* out = reinterpret_cast<float*>(row_ptr(node, h, blocks[bi].t0));
        std::fill(out, out + hd, 0.0f);
        double sum = 0;
        for (int64_t r = first_run[bi]; r < first_run[bi + 1]; ++r) {
          const float w = std::exp(at(r)[0] - mx);
          sum += double(w) * at(r)[1];
          for (int64_t d = 0; d < hd; ++d) out[d] += w * at(r)[2 + d];
        }
        const float inv = float(1.0 / (sum + sink_term(h, mx)));
        for (int64_t d = 0; d < hd; ++d) out[d] *= inv;
      }
    return;
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
    const auto first = [&](int i) { return visible_from(end(i)); };
    const int64_t lo = first(0), hi = end(nq - 1), span = hi - lo;

    thread_local std::vector<float> queries, scores, sums, inv;
    thread_local std::vector<char> gathered;
    queries.resize(size_t(nq * hd));
    scores.resize(size_t(nq * span));
    sums.resize(size_t(nq * hd));
    for (int i = 0; i < nq; ++i)
      std::memcpy(&queries[size_t(i * hd)], row_ptr(q, h0 + i % heads, b.t0 + i / heads),
                  size_t(hd) * sizeof(float));
    score(kvh, b.plane, lo, hi, queries.data(), nq, scores.data(), size_t(span), gathered);

    inv.resize(size_t(nq));
    for (int i = 0; i < nq; ++i) {
      float* p = scores.data() + size_t(i) * size_t(span);
      const int64_t f = first(i) - lo, e = end(i) - lo;
      std::fill(p, p + f, 0.0f);
      std::fill(p + e, p + span, 0.0f);
      float mx = 0.0f;
      const double sum = softmax_exp(rows, p + f, scale, p + f, e - f, &mx);
      inv[size_t(i)] = float(1.0 / (sum + sink_term(h0 + i % heads, mx)));
    }

    std::fill(sums.begin(), sums.end(), 0.0f);
    weigh(kvh, b.plane, lo, hi, scores.data(), size_t(span), nq, sums.data());

    for (int i = 0; i < nq; ++i) {
      float* out = reinterpret_cast<float*>(row_ptr(node, h0 + i % heads, b.t0 + i / heads));
      for (int64_t d = 0; d < hd; ++d) out[d] = sums[size_t(i * hd + d)] * inv[size_t(i)];
    }
  });
}

}  // namespace ps::cpu
