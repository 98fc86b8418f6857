// The session's context and KV cache on a real model (stories260K from ../shared): a context
// filled exactly, a prompt fed in uneven pieces against one evaluation of the whole, and
// several sequences of one session kept apart.
#include "engine/model_context.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "stories_model.h"

namespace ps {
namespace {

using test::on_cpu;
using test::stories;

const std::vector<int32_t> kIds = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315,
                                   421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408};

TEST(ModelContext, AContextOfNTakesExactlyNPositions) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const int n = 10;
  const std::vector<int32_t> ten(kIds.begin(), kIds.begin() + n);
  {
    ModelContext s(model, on_cpu(n));
    EXPECT_NO_THROW(s.eval(ten));
    EXPECT_EQ(s.n_past(), n);
    const int32_t one[1] = {kIds[n]};
    EXPECT_THROW(s.eval(one), UsageError);  // position n + 1
    EXPECT_EQ(s.n_past(), n);
  }
  {
    ModelContext s(model, on_cpu(n));
    const std::vector<int32_t> eleven(kIds.begin(), kIds.begin() + n + 1);
    EXPECT_THROW(s.eval(eleven), UsageError);
    EXPECT_EQ(s.n_past(), 0);
    // Filled one step at a time to exactly n.
    for (int i = 0; i < n; ++i) {
      const int32_t one[1] = {kIds[size_t(i)]};
      EXPECT_NO_THROW(s.eval(one)) << "position " << i;
    }
    const int32_t one[1] = {kIds[n]};
    EXPECT_THROW(s.eval(one), UsageError);
  }
}

// KV state carried across separate eval calls: pieces of 1, 3, 2, 5, 4, ... tokens give every
// position the logits one evaluation of the whole prompt gives. Not to the bit: pieces reach
// some scores through other kernels (a row dot where a whole block takes a tile), and the F16
// cache turns a difference of one float ulp in a key or value into one of a whole F16 step
// (2^-11) where the rounding flips. Measured: up to 1.0e-4 of the largest logit, whichever
// ulp-level change (a vectorised silu or softmax exp) moved a rounding; a cache read at the
// wrong position or a stale entry moves them by far more.
TEST(ModelContext, UnevenPiecesMatchOneEvaluation) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const int64_t n_vocab = model->model->params().n_vocab;
  ModelContext whole(model, on_cpu(64));
  const std::vector<float> want = whole.eval(kIds, /*all_logits=*/true);
  ASSERT_EQ(want.size(), kIds.size() * size_t(n_vocab));
  for (int n_batch : {512, 2}) {  // pieces in one batch each, and split again into batches
    ModelContext s(model, on_cpu(64, n_batch));
    std::vector<float> got;
    const size_t pieces[] = {1, 3, 2, 5, 4, 1, 7};
    size_t at = 0;
    for (size_t p : pieces) {
      const size_t n = std::min(p, kIds.size() - at);
      const std::vector<float> l =
          s.eval(std::span<const int32_t>(kIds.data() + at, n), /*all_logits=*/true);
      ASSERT_EQ(l.size(), n * size_t(n_vocab));
      got.insert(got.end(), l.begin(), l.end());
      at += n;
    }
    ASSERT_EQ(at, kIds.size());
    double scale = 0, worst = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::fabs(double(want[i])));
      const double d = std::fabs(double(got[i]) - double(want[i]));
      if (d > worst) worst = d, worst_at = i;
    }
    EXPECT_LT(worst / scale, 1e-3) << "batch " << n_batch << ": position "
                                   << worst_at / size_t(n_vocab) << " differs by " << worst;
  }
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(double(a[i])));
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  }
  return worst / scale;
}

// Sequences of one session keep their own caches and positions: interleaved steps of two
// sequences give each the logits a session of its own gives, and a rewound sequence continues
// as if the forgotten tokens had never been fed.
TEST(ModelContext, SequencesAreIndependent) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  ContextOptions o = on_cpu(3 * 64);  // the pool: a block per sequence
  o.n_ctx_per_seq = 32;
  o.n_seq = 3;
  ModelContext s(model, o);
  EXPECT_EQ(s.n_seq(), 3);
  const std::vector<int32_t> a(kIds.begin(), kIds.begin() + 9);
  const std::vector<int32_t> b(kIds.begin() + 5, kIds.begin() + 17);
  ModelContext alone_a(model, on_cpu(32)), alone_b(model, on_cpu(32));
  std::vector<float> want_a, want_b, got_a, got_b;
  // a and b fed in steps of 3 and 4, alternating, on sequences 2 and 0.
  for (size_t i = 0, j = 0; i < a.size() || j < b.size();) {
    if (i < a.size()) {
      const size_t n = std::min<size_t>(3, a.size() - i);
      std::span<const int32_t> piece(a.data() + i, n);
      const auto x = s.eval(piece, true, 2), y = alone_a.eval(piece, true);
      got_a.insert(got_a.end(), x.begin(), x.end());
      want_a.insert(want_a.end(), y.begin(), y.end());
      i += n;
    }
    if (j < b.size()) {
      const size_t n = std::min<size_t>(4, b.size() - j);
      std::span<const int32_t> piece(b.data() + j, n);
      const auto x = s.eval(piece, true, 0), y = alone_b.eval(piece, true);
      got_b.insert(got_b.end(), x.begin(), x.end());
      want_b.insert(want_b.end(), y.begin(), y.end());
      j += n;
    }
  }
  EXPECT_EQ(s.n_past(2), int(a.size()));
  EXPECT_EQ(s.n_past(0), int(b.size()));
  EXPECT_EQ(s.n_past(1), 0);
  EXPECT_LT(max_rel_diff(got_a, want_a), 1e-5);
  EXPECT_LT(max_rel_diff(got_b, want_b), 1e-5);
  // Rewind sequence 0 to 5 tokens of b, then feed a's tail: as a fresh session fed b[0:5] + it.
  ASSERT_TRUE(s.rewind(0, 5));
  EXPECT_EQ(s.n_past(0), 5);
  const std::vector<int32_t> tail(a.begin() + 2, a.end());
  const std::vector<float> got = s.eval(tail, true, 0);
  ModelContext fresh(model, on_cpu(32));
  fresh.eval(std::span<const int32_t>(b.data(), 5));
  const std::vector<float> want = fresh.eval(tail, true);
  EXPECT_LT(max_rel_diff(got, want), 1e-5);
  EXPECT_FALSE(s.rewind(0, 100));  // beyond what it holds
  EXPECT_FALSE(s.rewind(0, -1));
  EXPECT_THROW(s.eval(tail, false, 3), UsageError);
  ContextOptions bad = on_cpu(32);
  bad.n_seq = 0;
  EXPECT_THROW(ModelContext(model, bad), UsageError);
}

// Several sequences in one forward pass: each run's logits as its own pass gives them, with
// prompts and single tokens mixed, and the positions carried on.
TEST(ModelContext, OneBatchOfSeveralSequences) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  ContextOptions o = on_cpu(4 * 64, 16);  // the pool: a block per sequence
  o.n_ctx_per_seq = 40;
  o.n_seq = 4;
  ModelContext batched(model, o), apart(model, o);
  ASSERT_TRUE(batched.batched());
  const std::vector<std::vector<int32_t>> first = {{kIds.begin(), kIds.begin() + 5},
                                                   {kIds.begin() + 3, kIds.begin() + 4},
                                                   {kIds.begin() + 8, kIds.begin() + 15}};
  const int seqs[] = {3, 0, 1};
  for (int step = 0; step < 3; ++step) {
    std::vector<ModelContext::SeqTokens> runs;
    std::vector<std::vector<int32_t>> pieces;
    for (size_t i = 0; i < first.size(); ++i)
      pieces.push_back(step == 0 ? first[i]
                                 : std::vector<int32_t>{kIds[size_t(step * 3 + int(i))]});
    for (size_t i = 0; i < first.size(); ++i) runs.push_back({seqs[i], pieces[i]});
    const auto got = batched.eval_batch(runs);
    ASSERT_EQ(got.size(), runs.size());
    for (size_t i = 0; i < runs.size(); ++i) {
      const std::vector<float> want = apart.eval(pieces[i], false, seqs[i]);
      // Measured: 0 with POLYSTACK_ISA=scalar (the same arithmetic), ~3e-7 with AVX2, up to
      // 3e-4 with AVX-512, whose F32 kernels round differently for 3 rows than for 1.
      EXPECT_LT(max_rel_diff(got[i], want), 1e-3) << "step " << step << " run " << i;
      EXPECT_EQ(batched.n_past(seqs[i]), apart.n_past(seqs[i]));
    }
  }
  EXPECT_EQ(batched.n_past(2), 0);
  const std::vector<int32_t> one = {kIds[0]};
  std::vector<ModelContext::SeqTokens> twice = {{0, one}, {0, one}};
  EXPECT_THROW(batched.eval_batch(twice), UsageError);
  std::vector<ModelContext::SeqTokens> missing = {{7, one}};
  EXPECT_THROW(batched.eval_batch(missing), UsageError);
}

// The steps of a context's making, each called alone as doctor does: the shape from the
// options (the pool and the per-sequence limit, bad values refused), the pool's groups of
// layers (a sliding window's ring capped by the running sequences), the devices, and the plan,
// whose KV bytes are the pool's.
TEST(ModelContext, ItsStepsRunAlone) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const ModelParams& p = model->model->params();
  ContextOptions o = on_cpu(1000);
  o.n_seq = 4;
  ContextShape shape = resolve_shape(p, o);
  EXPECT_EQ(shape.n_cells, 1000);
  EXPECT_EQ(shape.n_ctx, 1000);  // a sequence may use the whole pool
  o.n_ctx_per_seq = 300;
  shape = resolve_shape(p, o);
  EXPECT_EQ(shape.n_ctx, 300);
  ContextOptions bad = o;
  bad.n_ctx_per_seq = 1001;
  EXPECT_THROW(resolve_shape(p, bad), UsageError);
  bad.n_ctx_per_seq = -1;
  EXPECT_THROW(resolve_shape(p, bad), UsageError);
  EXPECT_EQ(resolve_shape(p, ContextOptions{}).n_cells, std::min<int64_t>(p.n_ctx_train, 4096));

  // stories260K has no window: one group of 16 blocks (1000 cells rounded up).
  const KvGroups g = kv_groups(p, shape);
  ASSERT_EQ(g.groups.size(), 1u);
  EXPECT_EQ(g.groups[0].slots, 300);
  EXPECT_EQ(g.groups[0].n_blocks, 16);
  EXPECT_EQ(g.layer_group, std::vector<int>(size_t(p.n_layer), 0));
  // With a window of 100 on every other layer, those layers form a group of their own whose
  // ring (100 + one batch of 50 - 1 slots, 3 blocks) is capped by the 4 running sequences.
  ModelParams windowed = p;
  windowed.layer_window.assign(size_t(p.n_layer), 0);
  for (size_t l = 0; l < windowed.layer_window.size(); l += 2) windowed.layer_window[l] = 100;
  ContextShape small = shape;
  small.n_batch = 50;
  const KvGroups w = kv_groups(windowed, small);
  ASSERT_EQ(w.groups.size(), 2u);
  EXPECT_EQ(w.groups[size_t(w.layer_group[0])].slots, 149);
  EXPECT_EQ(w.groups[size_t(w.layer_group[0])].n_blocks, 4 * 3);
  EXPECT_EQ(w.groups[size_t(w.layer_group[1])].n_blocks, 16);

  const OpenedDevices opened = open_devices(*model, o);
  ASSERT_EQ(opened.devices.size(), 1u);
  EXPECT_EQ(opened.devices[0]->info().id, "cpu");
  const PlacementPlan plan = plan_layers(*model, shape, {opened.devices[0].get()}, o);
  const uint64_t row = uint64_t(p.head_dim * p.n_head_kv) * 2;
  for (int64_t l = 0; l < p.n_layer; ++l)
    EXPECT_EQ(plan.units[size_t(l + 1)].kv, 2 * row * 16 * 64) << "layer " << l;
  ModelContext ctx(model, o);
  EXPECT_EQ(ctx.kv_cache_bytes(), size_t(p.n_layer) * 2 * row * 16 * 64);
  EXPECT_EQ(ctx.n_cells(), 1000);
  EXPECT_EQ(ctx.n_ctx(), 300);
}

}  // namespace
}  // namespace ps
