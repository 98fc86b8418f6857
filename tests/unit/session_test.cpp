// The session's context and KV cache on a real model (stories260K from ../shared): a context
// filled exactly, and a prompt fed in uneven pieces against one evaluation of the whole.
#include "engine/session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace ps {
namespace {

std::shared_ptr<LoadedModel> stories() {
  const char* dir = std::getenv("POLYSTACK_SHARED_DIR");
  const std::string root = dir ? dir : POLYSTACK_SHARED_DIR;
  const std::string path = root + "/models/stories260K.gguf";
  if (!std::filesystem::exists(path)) return nullptr;
  return LoadedModel::load(path);
}

SessionOptions on_cpu(int n_ctx, int n_batch = 512) {
  SessionOptions o;
  o.device = "cpu";
  o.n_ctx = n_ctx;
  o.n_batch = n_batch;
  o.n_threads = 1;
  return o;
}

const std::vector<int32_t> kIds = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315,
                                   421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408};

TEST(Session, AContextOfNTakesExactlyNPositions) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const int n = 10;
  const std::vector<int32_t> ten(kIds.begin(), kIds.begin() + n);
  {
    Session s(model, on_cpu(n));
    EXPECT_NO_THROW(s.eval(ten));
    EXPECT_EQ(s.n_past(), n);
    const int32_t one[1] = {kIds[n]};
    EXPECT_THROW(s.eval(one), UsageError);  // position n + 1
    EXPECT_EQ(s.n_past(), n);
  }
  {
    Session s(model, on_cpu(n));
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
// position the logits one evaluation of the whole prompt gives.
TEST(Session, UnevenPiecesMatchOneEvaluation) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const int64_t n_vocab = model->model->params().n_vocab;
  Session whole(model, on_cpu(64));
  const std::vector<float> want = whole.eval(kIds, /*all_logits=*/true);
  ASSERT_EQ(want.size(), kIds.size() * size_t(n_vocab));
  for (int n_batch : {512, 2}) {  // pieces in one batch each, and split again into batches
    Session s(model, on_cpu(64, n_batch));
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
    EXPECT_LT(worst / scale, 1e-4) << "batch " << n_batch << ": position "
                                   << worst_at / size_t(n_vocab) << " differs by " << worst;
  }
}

}  // namespace
}  // namespace ps
