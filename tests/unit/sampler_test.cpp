#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"

namespace ps {
namespace {

std::vector<float> random_logits(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> logits(n);
  for (float& v : logits) v = normal(rng);
  return logits;
}

int32_t argmax_lowest_id(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

SamplerParams greedy_params() {
  SamplerParams p;
  p.temp = 0.0f;
  return p;
}

// Only the filtering steps under test; everything else neutral.
SamplerParams filter_params(float temp, int32_t top_k, float top_p, float min_p) {
  SamplerParams p;
  p.temp = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = 1234;
  return p;
}

std::map<int32_t, int> draw_counts(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) ++counts[sampler.sample(logits)];
  return counts;
}

std::set<int32_t> observed_tokens(const SamplerParams& params, const std::vector<float>& logits,
                                  int draws) {
  Sampler sampler(params, static_cast<int32_t>(logits.size()));
  std::set<int32_t> seen;
  for (const auto& [id, count] : draw_counts(sampler, logits, draws)) seen.insert(id);
  return seen;
}

// The penalty rule written out independently of the sampler, over the last `window` tokens.
std::vector<float> reference_penalized(std::vector<float> logits,
                                       const std::vector<int32_t>& history,
                                       const SamplerParams& p) {
  const size_t window = p.repeat_last_n < 0
                            ? history.size()
                            : std::min(history.size(), static_cast<size_t>(p.repeat_last_n));
  std::map<int32_t, int> counts;
  for (size_t i = history.size() - window; i < history.size(); ++i) ++counts[history[i]];
  for (const auto& [id, count] : counts) {
    float& l = logits[static_cast<size_t>(id)];
    if (l <= 0.0f) {
      l *= p.repeat_penalty;
    } else {
      l /= p.repeat_penalty;
    }
    l -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
  }
  return logits;
}

std::vector<int32_t> reference_ranking(const std::vector<float>& logits) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return ids;
}

// A hand-checked distribution: probabilities 0.05 0.30 0.02 0.40 0.15 0.03 0.05 for ids 0..6.
// Ranked: 3 (.40), 1 (.30), 4 (.15), 0 (.05), 6 (.05, ties with 0 so ranks after it), 5, 2.
// Cumulative along the ranking: .40 .70 .85 .90 .95 .98 1.00.
const std::vector<double> kHandProbs = {0.05, 0.30, 0.02, 0.40, 0.15, 0.03, 0.05};

std::vector<float> hand_logits(float offset) {
  std::vector<float> logits;
  for (double p : kHandProbs) logits.push_back(static_cast<float>(std::log(p)) + offset);
  return logits;
}

TEST(Sampler, GreedyPicksArgmaxOnRandomLogits) {
  for (uint32_t trial = 0; trial < 40; ++trial) {
    const auto logits = random_logits(1001, 100 + trial, 3.0f);
    SamplerParams p = greedy_params();
    p.temp = trial % 2 ? 0.0f : -1.0f;
    Sampler sampler(p, 1001);
    EXPECT_EQ(sampler.sample(logits), argmax_lowest_id(logits)) << "trial " << trial;
  }
}

TEST(Sampler, GreedyTiesGoToLowestId) {
  auto logits = random_logits(1001, 7, 1.0f);
  for (float& v : logits) v = std::min(v, 2.5f);
  logits[998] = logits[412] = logits[7] = 3.0f;
  Sampler greedy(greedy_params(), 1001);
  EXPECT_EQ(greedy.sample(logits), 7);

  Sampler top1(filter_params(1.0f, 1, 1.0f, 0.0f), 1001);
  EXPECT_EQ(top1.sample(logits), 7);

  // A vocabulary large enough for the threshold scan, with ties far apart in it.
  auto big = random_logits(100003, 8, 1.0f);
  for (float& v : big) v = std::min(v, 4.0f);
  big[99999] = big[70001] = big[65] = 5.0f;
  Sampler big_greedy(greedy_params(), 100003);
  EXPECT_EQ(big_greedy.sample(big), 65);

  const std::vector<float> flat(513, -0.25f);
  Sampler flat_greedy(greedy_params(), 513);
  EXPECT_EQ(flat_greedy.sample(flat), 0);
}

TEST(Sampler, GreedyIgnoresNaN) {
  auto logits = random_logits(257, 9);
  logits[3] = std::numeric_limits<float>::quiet_NaN();
  logits[100] = 10.0f;
  logits[0] = std::numeric_limits<float>::quiet_NaN();
  Sampler sampler(greedy_params(), 257);
  EXPECT_EQ(sampler.sample(logits), 100);
}

std::vector<int32_t> generate(const SamplerParams& p, int steps) {
  const int32_t n_vocab = 1001;
  Sampler sampler(p, n_vocab);
  std::vector<int32_t> tokens;
  for (int i = 0; i < steps; ++i) {
    const auto logits = random_logits(n_vocab, 500 + static_cast<uint32_t>(i), 1.5f);
    tokens.push_back(sampler.sample(logits));
    sampler.accept(tokens.back());
  }
  return tokens;
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedsDiffer) {
  SamplerParams p;
  p.repeat_penalty = 1.1f;
  p.seed = 42;
  const auto first = generate(p, 200);
  EXPECT_EQ(first, generate(p, 200));
  // A sequence that is always the argmax would pass the check above without any randomness.
  EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 100u);

  SamplerParams other = p;
  other.seed = 43;
  EXPECT_NE(first, generate(other, 200));
  other.seed = p.seed + (uint64_t{1} << 32);
  EXPECT_NE(first, generate(other, 200));
}

TEST(Sampler, ResetRestartsTheSequenceAndForgetsHistory) {
  SamplerParams p = filter_params(1.0f, 0, 1.0f, 0.0f);
  p.repeat_penalty = 1.3f;
  Sampler sampler(p, 31);
  const auto logits = random_logits(31, 11);
  std::vector<int32_t> first;
  for (int i = 0; i < 50; ++i) {
    first.push_back(sampler.sample(logits));
    sampler.accept(first.back());
  }
  sampler.reset();
  std::vector<int32_t> second;
  for (int i = 0; i < 50; ++i) {
    second.push_back(sampler.sample(logits));
    sampler.accept(second.back());
  }
  EXPECT_EQ(first, second);
}

TEST(Sampler, TopKOneEqualsGreedyAtAnyTemperature) {
  for (float temp : {0.05f, 1.0f, 7.5f, 1000.0f}) {
    for (uint32_t trial = 0; trial < 10; ++trial) {
      const auto logits = random_logits(1001, 900 + trial, 2.0f);
      SamplerParams p = filter_params(temp, 1, 0.95f, 0.05f);
      p.repeat_penalty = 1.3f;
      p.seed = trial;
      SamplerParams g = p;
      g.temp = 0.0f;
      Sampler top1(p, 1001);
      Sampler greedy(g, 1001);
      // Penalize the raw argmax so the choice is not trivially the raw argmax.
      for (Sampler* s : {&top1, &greedy}) {
        s->accept(argmax_lowest_id(logits));
        s->accept(17);
      }
      for (int draw = 0; draw < 20; ++draw) {
        ASSERT_EQ(top1.sample(logits), greedy.sample(logits)) << "temp " << temp;
      }
    }
  }
}

struct KeptSetCase {
  int32_t top_k;
  float top_p;
  float min_p;
  std::set<int32_t> kept;
};

// Each case is checked on the 7-token distribution itself, and again with those 7 tokens
// scattered through a 1001-token vocabulary whose other tokens carry about 1e-9 of the mass, so
// both the full-vocabulary path and the top-k scan see it.
void check_kept_sets(const std::vector<KeptSetCase>& cases, float temp) {
  const auto small = hand_logits(0.3f);
  std::vector<float> big(1001);
  for (size_t i = 0; i < big.size(); ++i) big[i] = -30.0f + 0.001f * static_cast<float>(i % 97);
  auto big_id = [](int32_t id) { return 137 * id + 11; };
  for (int32_t id = 0; id < 7; ++id) big[static_cast<size_t>(big_id(id))] = small[id];

  for (const KeptSetCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "top_k " << c.top_k << " top_p " << c.top_p << " min_p "
                                      << c.min_p << " temp " << temp);
    EXPECT_EQ(observed_tokens(filter_params(temp, c.top_k, c.top_p, c.min_p), small, 6000), c.kept);
    const bool tail_kept = c.top_k <= 0 && c.top_p == 1.0f && c.min_p == 0.0f;
    if (tail_kept || (c.top_k > 0 && c.top_k < 7)) continue;  // not the same set in `big`
    std::set<int32_t> big_kept;
    for (int32_t id : c.kept) big_kept.insert(big_id(id));
    for (int32_t top_k : {0, 20}) {
      EXPECT_EQ(observed_tokens(filter_params(temp, top_k, c.top_p, c.min_p), big, 6000), big_kept)
          << "in the 1001-token vocabulary with top_k " << top_k;
    }
  }
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  check_kept_sets({{0, 0.0f, 0.0f, {3}},
                   {0, 0.35f, 0.0f, {3}},
                   {0, 0.65f, 0.0f, {3, 1}},
                   {0, 0.8f, 0.0f, {3, 1, 4}},
                   {0, 0.88f, 0.0f, {3, 1, 4, 0}},
                   {0, 0.93f, 0.0f, {3, 1, 4, 0, 6}},
                   {0, 0.96f, 0.0f, {3, 1, 4, 0, 6, 5}},
                   {0, 0.99f, 0.0f, {3, 1, 4, 0, 6, 5, 2}},
                   {0, 1.0f, 0.0f, {3, 1, 4, 0, 6, 5, 2}}},
                  1.0f);
}

TEST(Sampler, TopPMeasuresMassAfterTopK) {
  // With top_k = 2 the survivors renormalize to .571 and .429, so 0.55 is reached by token 3
  // alone; over the whole distribution it takes tokens 3 and 1.
  check_kept_sets({{2, 0.55f, 0.0f, {3}}, {0, 0.55f, 0.0f, {3, 1}}, {4, 0.9f, 0.0f, {3, 1, 4}}},
                  1.0f);
}

TEST(Sampler, MinPKeepsTokensAboveFractionOfMax) {
  // min_p * 0.40 is the bar: 0.5 -> .20, 0.3 -> .12, 0.1 -> .04, 0.06 -> .024.
  const std::vector<KeptSetCase> cases = {{0, 1.0f, 1.0f, {3}},
                                          {0, 1.0f, 0.5f, {3, 1}},
                                          {0, 1.0f, 0.3f, {3, 1, 4}},
                                          {0, 1.0f, 0.1f, {3, 1, 4, 0, 6}},
                                          {0, 1.0f, 0.06f, {3, 1, 4, 0, 6, 5}},
                                          {0, 0.65f, 0.1f, {3, 1}},
                                          {0, 0.96f, 0.3f, {3, 1, 4}},
                                          // top_p measures against the mass before min_p:
                                          // .70 < .75, though .70 / .85 would reach it.
                                          {0, 0.75f, 0.3f, {3, 1, 4}},
                                          {5, 1.0f, 0.01f, {3, 1, 4, 0, 6}}};
  check_kept_sets(cases, 1.0f);
  // Temperature comes after the filters, so flattening the distribution keeps the same sets.
  check_kept_sets(cases, 5.0f);
}

double chi_square(const std::map<int32_t, int>& counts, const std::vector<double>& expected_prob,
                  int draws) {
  double stat = 0.0;
  for (size_t id = 0; id < expected_prob.size(); ++id) {
    const auto it = counts.find(static_cast<int32_t>(id));
    const double observed = it == counts.end() ? 0.0 : it->second;
    if (expected_prob[id] == 0.0) {
      EXPECT_EQ(observed, 0.0) << "token " << id << " was filtered out but drawn";
      continue;
    }
    const double expected = expected_prob[id] * draws;
    stat += (observed - expected) * (observed - expected) / expected;
  }
  return stat;
}

std::vector<double> softmax_over(const std::vector<float>& logits, const std::set<int32_t>& kept,
                                 double temp) {
  std::vector<double> probs(logits.size(), 0.0);
  double total = 0.0;
  for (int32_t id : kept) total += probs[id] = std::exp(logits[id] / temp);
  for (double& p : probs) p /= total;
  return probs;
}

TEST(Sampler, FrequenciesMatchSoftmaxAtTemperature) {
  const std::vector<float> logits = {0.3f, -1.2f, 1.1f, 0.0f, -0.4f, 0.8f, -2.0f, 0.5f, -0.9f};
  const int draws = 20000;
  const std::set<int32_t> all = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  {
    Sampler sampler(filter_params(0.7f, 0, 1.0f, 0.0f), 9);
    // 8 degrees of freedom: 26.12 is the 0.999 quantile; a wrong temperature scores in the
    // hundreds at this many draws.
    EXPECT_LT(
        chi_square(draw_counts(sampler, logits, draws), softmax_over(logits, all, 0.7), draws),
        26.12);
  }
  {
    // top_k 5 keeps ids 2, 5, 7, 0, 3; 4 degrees of freedom, 0.999 quantile 18.47.
    Sampler sampler(filter_params(1.3f, 5, 1.0f, 0.0f), 9);
    EXPECT_LT(chi_square(draw_counts(sampler, logits, draws),
                         softmax_over(logits, {2, 5, 7, 0, 3}, 1.3), draws),
              18.47);
  }
  {
    // min_p 0.4 keeps logits >= 1.1 + ln 0.4 = 0.184: ids 2, 5, 7, 0; 3 dof, quantile 16.27.
    Sampler sampler(filter_params(2.0f, 0, 1.0f, 0.4f), 9);
    EXPECT_LT(chi_square(draw_counts(sampler, logits, draws),
                         softmax_over(logits, {2, 5, 7, 0}, 2.0), draws),
              16.27);
  }
}

// Token 4 leads token 9 by a margin a penalty can erase; every other token is far behind.
std::vector<float> two_leaders(float leader, float runner_up) {
  auto logits = random_logits(11, 13, 0.3f);
  const float floor = std::min(leader, runner_up) - 2.0f;
  for (float& v : logits) v = floor - std::abs(v);
  logits[4] = leader;
  logits[9] = runner_up;
  return logits;
}

int32_t greedy_after(const SamplerParams& p, const std::vector<float>& logits,
                     const std::vector<int32_t>& accepted) {
  Sampler sampler(p, static_cast<int32_t>(logits.size()));
  for (int32_t t : accepted) sampler.accept(t);
  return sampler.sample(logits);
}

TEST(Sampler, RepeatPenaltyDividesPositiveLogits) {
  const auto logits = two_leaders(2.0f, 1.8f);
  SamplerParams p = greedy_params();
  EXPECT_EQ(greedy_after(p, logits, {4}), 4);  // penalty 1 is off
  p.repeat_penalty = 1.2f;                     // 2.0 / 1.2 = 1.667 < 1.8
  EXPECT_EQ(greedy_after(p, logits, {4}), 9);
  EXPECT_EQ(greedy_after(p, logits, {}), 4);
  p.repeat_penalty = 1.1f;  // 2.0 / 1.1 = 1.818 > 1.8
  EXPECT_EQ(greedy_after(p, logits, {4}), 4);
  p.repeat_penalty = 0.5f;  // below 1 it boosts: 1.8 / 0.5 = 3.6 > 2.0
  EXPECT_EQ(greedy_after(p, logits, {9}), 9);

  // The same flip through the sampling path rather than greedy.
  SamplerParams sampled = filter_params(1.0f, 1, 0.95f, 0.05f);
  sampled.repeat_penalty = 1.2f;
  EXPECT_EQ(greedy_after(sampled, logits, {4}), 9);
}

TEST(Sampler, RepeatPenaltyMultipliesNegativeLogits) {
  const auto logits = two_leaders(-1.0f, -1.1f);
  SamplerParams p = greedy_params();
  p.repeat_penalty = 1.2f;  // -1.0 * 1.2 = -1.2 < -1.1 (dividing would raise it to -0.83)
  EXPECT_EQ(greedy_after(p, logits, {4}), 9);
  p.repeat_penalty = 1.05f;  // -1.05 > -1.1
  EXPECT_EQ(greedy_after(p, logits, {4}), 4);
}

TEST(Sampler, RepeatPenaltyAppliesOncePerDistinctToken) {
  // Three occurrences still divide once: 2.0 / 1.2 = 1.667 > 1.5 (1.2^3 would give 1.157).
  const auto logits = two_leaders(2.0f, 1.5f);
  SamplerParams p = greedy_params();
  p.repeat_penalty = 1.2f;
  EXPECT_EQ(greedy_after(p, logits, {4, 4, 4}), 4);
}

TEST(Sampler, RepeatPenaltyWindow) {
  const auto logits = two_leaders(2.0f, 1.8f);
  SamplerParams p = greedy_params();
  p.repeat_penalty = 1.2f;
  p.repeat_last_n = 3;
  EXPECT_EQ(greedy_after(p, logits, {4, 0, 0}), 9);     // still in the last 3
  EXPECT_EQ(greedy_after(p, logits, {4, 0, 0, 0}), 4);  // slid out
  p.repeat_last_n = 0;
  EXPECT_EQ(greedy_after(p, logits, {4}), 4);
  p.repeat_last_n = -1;
  std::vector<int32_t> long_history = {4};
  long_history.resize(500, 0);
  EXPECT_EQ(greedy_after(p, logits, long_history), 9);
  p.repeat_last_n = 64;
  EXPECT_EQ(greedy_after(p, logits, long_history), 4);

  Sampler sampler(p, 11);
  sampler.accept(4);
  EXPECT_EQ(sampler.sample(logits), 9);
  sampler.reset();
  EXPECT_EQ(sampler.sample(logits), 4);
}

TEST(Sampler, FrequencyAndPresencePenalties) {
  const auto logits = two_leaders(2.0f, 1.5f);
  SamplerParams p = greedy_params();
  p.frequency_penalty = 0.2f;
  p.presence_penalty = 0.05f;
  EXPECT_EQ(greedy_after(p, logits, {4, 4}), 4);     // 2.0 - 0.4 - 0.05 = 1.55
  EXPECT_EQ(greedy_after(p, logits, {4, 4, 4}), 9);  // 2.0 - 0.6 - 0.05 = 1.35
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.6f;
  EXPECT_EQ(greedy_after(p, logits, {4}), 9);  // 1.4
  p.presence_penalty = 0.4f;
  EXPECT_EQ(greedy_after(p, logits, {4, 4, 4, 4}), 4);  // 1.6, whatever the count
  // Combined with the repeat penalty, which comes first: 2.0 / 1.1 - 0.4 = 1.418.
  p.repeat_penalty = 1.1f;
  EXPECT_EQ(greedy_after(p, logits, {4}), 9);
}

constexpr size_t kBigVocab = 262144 + 7;

// 90 tokens for a 64-token window: the window holds the 22 best raw tokens (so the top-k scan
// must look past them) among others; the 26 tokens before it hold the next 9 leaders, which
// must not be penalized.
std::vector<int32_t> big_history(const std::vector<float>& logits) {
  const auto ranking = reference_ranking(logits);
  std::vector<int32_t> history;
  for (size_t i = 0; i < 90; ++i) {
    const auto other = static_cast<int32_t>((i * 7919) % kBigVocab);
    if (i < 26) {
      history.push_back(i % 3 == 0 ? ranking[22 + i / 3] : other);
    } else {
      history.push_back((i - 26) % 3 == 0 ? ranking[(i - 26) / 3] : other);
    }
  }
  return history;
}

TEST(Sampler, LargeVocabularyMatchesReferenceWithPenalties) {
  const auto logits = random_logits(kBigVocab, 77, 2.0f);
  const auto history = big_history(logits);
  for (float repeat_penalty : {1.5f, 0.3f}) {
    SCOPED_TRACE(::testing::Message() << "repeat_penalty " << repeat_penalty);
    SamplerParams p = greedy_params();
    p.repeat_penalty = repeat_penalty;
    p.frequency_penalty = 0.3f;
    p.presence_penalty = 0.2f;
    const auto reference = reference_ranking(reference_penalized(logits, history, p));
    EXPECT_EQ(greedy_after(p, logits, history), reference[0]);

    // At a huge temperature the kept set is drawn almost uniformly, so it shows in the draws.
    for (int32_t top_k : {8, 3}) {
      p.temp = 1000.0f;
      p.top_k = top_k;
      p.top_p = 1.0f;
      p.min_p = 0.0f;
      Sampler sampler(p, static_cast<int32_t>(kBigVocab));
      for (int32_t t : history) sampler.accept(t);
      std::set<int32_t> seen;
      for (const auto& [id, count] : draw_counts(sampler, logits, 1500)) seen.insert(id);
      EXPECT_EQ(seen, std::set<int32_t>(reference.begin(), reference.begin() + top_k));
    }
  }
}

TEST(Sampler, LargeVocabularyTopPAndMinPWithoutTopK) {
  // 30 leaders near +12 hold most of the mass over a long tail near 0.
  auto logits = random_logits(kBigVocab, 78, 1.0f);
  std::mt19937 rng(79);
  std::uniform_real_distribution<float> jitter(0.0f, 1.5f);
  for (int i = 0; i < 30; ++i) logits[static_cast<size_t>(i * 8731 + 5)] = 12.0f + jitter(rng);
  const auto ranking = reference_ranking(logits);

  double total = 0.0;
  for (float v : logits) total += std::exp(static_cast<double>(v) - logits[ranking[0]]);
  const float top_p = 0.5f;
  size_t top_p_size = 0;
  double cumulative = 0.0;
  while (cumulative < top_p) {
    cumulative +=
        std::exp(static_cast<double>(logits[ranking[top_p_size++]]) - logits[ranking[0]]) / total;
  }
  // The set must not hinge on rounding in the last place.
  ASSERT_GT(cumulative - top_p, 1e-4);
  // Small enough that 500 nearly uniform draws show every member (about 16 each at worst).
  ASSERT_GT(top_p_size, 3u);
  ASSERT_LE(top_p_size, 30u);
  {
    SamplerParams p = filter_params(1000.0f, 0, top_p, 0.0f);
    EXPECT_EQ(observed_tokens(p, logits, 500),
              std::set<int32_t>(ranking.begin(), ranking.begin() + top_p_size));
  }
  {
    const float min_p = 0.4f;
    const float bar = logits[ranking[0]] + std::log(min_p);
    std::set<int32_t> expected;
    for (size_t i = 0; logits[ranking[i]] >= bar; ++i) expected.insert(ranking[i]);
    ASSERT_GT(expected.size(), 2u);
    ASSERT_LE(expected.size(), 30u);
    SamplerParams p = filter_params(1000.0f, 0, 1.0f, min_p);
    EXPECT_EQ(observed_tokens(p, logits, 500), expected);
  }
}

TEST(Sampler, InvalidParamsThrowUsageError) {
  auto make = [](auto tweak) {
    SamplerParams p;
    tweak(p);
    return Sampler(p, 100);
  };
  EXPECT_THROW(make([](SamplerParams& p) { p.top_p = -0.1f; }), UsageError);
  EXPECT_THROW(make([](SamplerParams& p) { p.top_p = 1.01f; }), UsageError);
  EXPECT_THROW(make([](SamplerParams& p) { p.top_p = std::nanf(""); }), UsageError);
  EXPECT_THROW(make([](SamplerParams& p) { p.min_p = -0.01f; }), UsageError);
  EXPECT_THROW(make([](SamplerParams& p) { p.min_p = 1.5f; }), UsageError);
  EXPECT_THROW(make([](SamplerParams& p) { p.repeat_penalty = 0.0f; }), UsageError);
  EXPECT_THROW(make([](SamplerParams& p) { p.repeat_penalty = -1.2f; }), UsageError);
  EXPECT_THROW(make([](SamplerParams& p) { p.repeat_last_n = -2; }), UsageError);
  EXPECT_THROW(make([](SamplerParams& p) { p.temp = std::nanf(""); }), UsageError);
  EXPECT_THROW(Sampler(SamplerParams{}, 0), UsageError);
  // The edges of each range are valid.
  EXPECT_NO_THROW(make([](SamplerParams& p) {
    p.top_p = 0.0f;
    p.min_p = 1.0f;
    p.repeat_last_n = -1;
  }));
  EXPECT_NO_THROW(make([](SamplerParams& p) {
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.top_k = -5;
  }));

  Sampler sampler(SamplerParams{}, 100);
  const auto short_logits = random_logits(99, 3);
  EXPECT_THROW(sampler.sample(short_logits), UsageError);
  const auto long_logits = random_logits(101, 3);
  EXPECT_THROW(sampler.sample(long_logits), UsageError);
  EXPECT_THROW(sampler.accept(100), UsageError);
  EXPECT_THROW(sampler.accept(-1), UsageError);
  try {
    SamplerParams p;
    p.top_p = 1.5f;
    Sampler bad(p, 100);
    FAIL() << "no exception";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// Allows the tokens of a set; counts what it was asked.
class SetFilter : public TokenFilter {
 public:
  explicit SetFilter(std::set<int32_t> ok) : ok_(std::move(ok)) {}
  bool allows(int32_t t) const override { return ok_.count(t) > 0; }
  void accept(int32_t t) override { accepted.push_back(t); }
  std::vector<int32_t> accepted;

 private:
  std::set<int32_t> ok_;
};

TEST(SamplerFilter, GreedyTakesTheBestAllowedToken) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> logits = random_logits(1000, seed);
    std::mt19937 rng(seed);
    std::set<int32_t> ok;
    for (int i = 0; i < 5; ++i) ok.insert(int32_t(rng() % 1000));
    SamplerParams p;
    p.temp = 0;
    Sampler s(p, 1000);
    s.set_filter(std::make_unique<SetFilter>(ok));
    int32_t best = *ok.begin();
    for (int32_t t : ok)
      if (logits[size_t(t)] > logits[size_t(best)]) best = t;
    EXPECT_EQ(s.sample(logits), best);
  }
}

TEST(SamplerFilter, TopKCountsOnlyAllowedTokens) {
  // Allowed: 3 tokens ranked far down; top_k 2 keeps the best two of them, never the third,
  // and never a refused token however likely.
  std::vector<float> logits(600, 0.0f);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(i % 97) * 0.01f;
  logits[10] = 5.0f;  // refused, the most likely
  logits[400] = 1.0f, logits[401] = 0.9f, logits[402] = -3.0f;
  SamplerParams p;
  p.temp = 1.0f, p.top_k = 2, p.top_p = 1.0f, p.min_p = 0.0f, p.seed = 7;
  Sampler s(p, 600);
  s.set_filter(std::make_unique<SetFilter>(std::set<int32_t>{400, 401, 402}));
  std::map<int32_t, int> seen;
  for (int i = 0; i < 400; ++i) ++seen[s.sample(logits)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[400], seen[401]);
  EXPECT_GT(seen[401], 50);
  EXPECT_EQ(seen.count(402), 0u);
}

TEST(SamplerLogprobs, LogSoftmaxAfterPenaltiesOverAllowedTokens) {
  const std::vector<float> logits = random_logits(300, 11, 2.0f);
  SamplerParams p;
  p.repeat_penalty = 1.3f, p.presence_penalty = 0.4f, p.temp = 0.7f;
  for (const bool filtered : {false, true}) {
    Sampler s(p, 300);
    for (int32_t t : {5, 9, 9, 42}) s.accept(t);
    std::set<int32_t> ok;
    for (int32_t t = 0; t < 300; t += filtered ? 3 : 1) ok.insert(t);
    if (filtered) s.set_filter(std::make_unique<SetFilter>(ok));
    // The reference: penalties by hand, then log-softmax in double over the allowed tokens.
    std::vector<double> v(300, -INFINITY);
    for (int32_t t : ok) {
      double x = logits[size_t(t)];
      if (t == 5 || t == 9 || t == 42) {
        x = x <= 0 ? x * 1.3 : x / 1.3;
        x -= 0.4;
      }
      v[size_t(t)] = x;
    }
    double m = -INFINITY, z = 0;
    for (double x : v) m = std::max(m, x);
    for (double x : v) z += std::exp(x - m);
    std::vector<TokenLogit> top;
    const float lp9 = s.logprobs(logits, 9, 5, top);
    EXPECT_NEAR(lp9, v[9] - m - std::log(z), 1e-4);
    ASSERT_EQ(top.size(), 5u);
    for (size_t i = 0; i < top.size(); ++i) {
      EXPECT_NEAR(top[i].logit, v[size_t(top[i].id)] - m - std::log(z), 1e-4);
      EXPECT_TRUE(ok.count(top[i].id));
      if (i) {
        EXPECT_GE(top[i - 1].logit, top[i].logit);
      }
    }
    int32_t best = *ok.begin();
    for (int32_t t : ok)
      if (v[size_t(t)] > v[size_t(best)]) best = t;
    EXPECT_EQ(top[0].id, best);
  }
}

TEST(SamplerFilter, NoAllowedTokenIsMinusOne) {
  const std::vector<float> logits = random_logits(50, 3);
  SamplerParams p;
  Sampler s(p, 50);
  s.set_filter(std::make_unique<SetFilter>(std::set<int32_t>{}));
  EXPECT_EQ(s.sample(logits), -1);
}

}  // namespace
}  // namespace ps
