#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"

namespace ps {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Higher logit first, lower id on ties, so every step is deterministic whatever the sort.
bool ranks_before(const TokenLogit& a, const TokenLogit& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

bool by_id(const TokenLogit& a, const TokenLogit& b) { return a.id < b.id; }

// NaN would break the strict weak ordering every sort relies on; it ranks as -inf instead.
float sanitize(float logit) { return std::isnan(logit) ? kNegInf : logit; }

std::string fmt_float(float v) { return std::to_string(v); }

void validate(const SamplerParams& p, int32_t n_vocab) {
  if (n_vocab <= 0) {
    throw UsageError("sampler: vocabulary size must be positive, got " + std::to_string(n_vocab));
  }
  if (std::isnan(p.temp)) throw UsageError("sampler: temperature is NaN");
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) {
    throw UsageError("sampler: top_p must be in [0, 1], got " + fmt_float(p.top_p));
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    throw UsageError("sampler: min_p must be in [0, 1], got " + fmt_float(p.min_p));
  }
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty)) {
    throw UsageError("sampler: repeat_penalty must be a positive number, got " +
                     fmt_float(p.repeat_penalty));
  }
  if (p.repeat_last_n < -1) {
    throw UsageError("sampler: repeat_last_n must be >= -1 (-1 means all tokens), got " +
                     std::to_string(p.repeat_last_n));
  }
  if (!std::isfinite(p.frequency_penalty)) {
    throw UsageError("sampler: frequency_penalty must be finite");
  }
  if (!std::isfinite(p.presence_penalty)) {
    throw UsageError("sampler: presence_penalty must be finite");
  }
}

std::mt19937 seeded_rng(uint64_t seed) {
  // mt19937 takes 32 bits directly; a seed_seq keeps seeds that differ only above bit 31 apart.
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  return std::mt19937(seq);
}

}  // namespace

Sampler::Sampler(const SamplerParams& params, int32_t n_vocab)
    : params_(params), n_vocab_(n_vocab) {
  validate(params, n_vocab);
  rng_ = seeded_rng(params_.seed);
}

void Sampler::reset() {
  history_.clear();
  history_counts_.clear();
  rng_ = seeded_rng(params_.seed);
}

void Sampler::accept(int32_t token) {
  if (token < 0 || token >= n_vocab_) {
    throw UsageError("sampler: accepted token " + std::to_string(token) +
                     " is outside the vocabulary of " + std::to_string(n_vocab_));
  }
  if (params_.repeat_last_n == 0) return;
  history_.push_back(token);
  ++history_counts_[token];
  if (params_.repeat_last_n > 0 && history_.size() > static_cast<size_t>(params_.repeat_last_n)) {
    const int32_t evicted = history_.front();
    history_.pop_front();
    auto it = history_counts_.find(evicted);
    if (--it->second == 0) history_counts_.erase(it);
  }
}

bool Sampler::penalties_active() const {
  return params_.repeat_last_n != 0 && !history_counts_.empty() &&
         (params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
          params_.presence_penalty != 0.0f);
}

void Sampler::compute_penalized(std::span<const float> logits) {
  penalized_.clear();
  if (!penalties_active()) return;
  for (const auto& [id, count] : history_counts_) {
    float logit = sanitize(logits[static_cast<size_t>(id)]);
    // As llama.cpp: the repeat penalty applies once per distinct token, whatever its count.
    if (logit <= 0.0f) {
      logit *= params_.repeat_penalty;
    } else {
      logit /= params_.repeat_penalty;
    }
    logit -= static_cast<float>(count) * params_.frequency_penalty +
             (count > 0 ? params_.presence_penalty : 0.0f);
    penalized_.push_back({id, sanitize(logit)});
  }
  std::sort(penalized_.begin(), penalized_.end(), by_id);
}

void Sampler::fill_all_candidates(std::span<const float> logits) {
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    candidates_[i] = {static_cast<int32_t>(i), sanitize(logits[i])};
  }
  for (const TokenLogit& p : penalized_) candidates_[static_cast<size_t>(p.id)].logit = p.logit;
}

void Sampler::select_top(std::span<const float> logits, size_t k) {
  // Penalties only move the tokens in the window, so the k best after penalties are among the
  // k + |window| best raw logits plus the window itself.
  const size_t keep = k + penalized_.size();
  const size_t n = logits.size();
  if (keep >= n) {
    fill_all_candidates(logits);
  } else {
    // One pass with a rising threshold: the buffer is cut back to `keep` whenever it fills, and
    // whole blocks that cannot beat the threshold are skipped with a vectorizable test.
    candidates_.clear();
    const size_t capacity = 2 * keep + 64;
    candidates_.reserve(capacity);
    bool have_threshold = false;
    float threshold = kNegInf;
    auto cut_back = [&] {
      std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(keep - 1),
                       candidates_.end(), ranks_before);
      candidates_.resize(keep);
      // A later token equal to the threshold has a higher id, so it ranks below all kept ones.
      threshold = candidates_[keep - 1].logit;
      have_threshold = true;
    };
    constexpr size_t kBlock = 64;
    const float* data = logits.data();
    for (size_t begin = 0; begin < n; begin += kBlock) {
      const size_t end = std::min(begin + kBlock, n);
      if (have_threshold) {
        int any_above = 0;
        for (size_t i = begin; i < end; ++i) any_above |= data[i] > threshold;
        if (!any_above) continue;
      }
      for (size_t i = begin; i < end; ++i) {
        const float v = data[i];
        if (!have_threshold || v > threshold) {
          candidates_.push_back({static_cast<int32_t>(i), sanitize(v)});
          if (candidates_.size() == capacity) cut_back();
        }
      }
    }
    if (candidates_.size() > keep) cut_back();
    if (!penalized_.empty()) {
      std::erase_if(candidates_, [&](const TokenLogit& c) {
        return std::binary_search(penalized_.begin(), penalized_.end(), c, by_id);
      });
      candidates_.insert(candidates_.end(), penalized_.begin(), penalized_.end());
    }
  }
  const size_t top = std::min(k, candidates_.size());
  std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(top),
                    candidates_.end(), ranks_before);
  candidates_.resize(top);
}

void Sampler::apply_nucleus(bool ranked) {
  const bool use_top_p = params_.top_p < 1.0f;
  const bool use_min_p = params_.min_p > 0.0f;
  if (candidates_.size() <= 1 || (!use_top_p && !use_min_p)) return;

  float max_logit = kNegInf;
  if (ranked) {
    max_logit = candidates_.front().logit;
  } else {
    for (const TokenLogit& c : candidates_) max_logit = std::max(max_logit, c.logit);
  }
  if (!std::isfinite(max_logit)) return;  // draw() settles degenerate distributions

  // Both steps keep a prefix of the ranking (min_p by a logit threshold, top_p by mass), so the
  // result is the shorter prefix and the cheap threshold can run first to shrink the rest.
  const float min_logit = use_min_p ? max_logit + std::log(params_.min_p) : kNegInf;
  if (!use_top_p) {
    std::erase_if(candidates_, [&](const TokenLogit& c) { return c.logit < min_logit; });
    return;
  }

  // top_p measures mass against the whole distribution it receives, so the normalizer is taken
  // before min_p trims anything.
  weights_.resize(candidates_.size());
  double total = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    weights_[i] = std::exp(candidates_[i].logit - max_logit);
    total += weights_[i];
  }
  if (use_min_p) {
    size_t kept = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (candidates_[i].logit >= min_logit) {
        candidates_[kept] = candidates_[i];
        weights_[kept++] = weights_[i];
      }
    }
    candidates_.resize(kept);
    weights_.resize(kept);
  }
  const double target = static_cast<double>(params_.top_p) * total;

  if (ranked) {
    double cumulative = 0.0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += weights_[i];
      if (cumulative >= target) {
        candidates_.resize(i + 1);
        return;
      }
    }
    return;
  }

  // Unranked (the whole vocabulary): sorting it would cost more than everything else together,
  // and a flat distribution can need most of it to reach top_p. Bucket the mass by logit instead
  // (buckets are monotone in the logit, so they follow the ranking), find the bucket where the
  // running mass crosses the target, and rank only that bucket's tokens.
  float low_logit = max_logit;
  for (const TokenLogit& c : candidates_) {
    if (c.logit > kNegInf) low_logit = std::min(low_logit, c.logit);
  }
  const size_t n_buckets = std::clamp<size_t>(candidates_.size() / 8, 16, 4096);
  const float scale =
      max_logit > low_logit ? static_cast<float>(n_buckets - 1) / (max_logit - low_logit) : 0.0f;
  auto bucket_of = [&](float logit) {
    return std::min(n_buckets - 1, static_cast<size_t>((max_logit - logit) * scale));
  };
  bucket_mass_.assign(n_buckets, 0.0);
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (candidates_[i].logit > kNegInf)
      bucket_mass_[bucket_of(candidates_[i].logit)] += weights_[i];
  }
  double cumulative = 0.0;
  size_t crossing = 0;
  while (crossing < n_buckets && cumulative + bucket_mass_[crossing] < target) {
    cumulative += bucket_mass_[crossing++];
  }
  if (crossing == n_buckets) return;  // rounding kept the sum a hair short: keep everything

  boundary_.clear();
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (candidates_[i].logit > kNegInf && bucket_of(candidates_[i].logit) == crossing) {
      boundary_.push_back({candidates_[i], weights_[i]});
    }
  }
  std::sort(boundary_.begin(), boundary_.end(),
            [](const auto& a, const auto& b) { return ranks_before(a.first, b.first); });
  TokenLogit cut = boundary_.back().first;
  for (const auto& [candidate, weight] : boundary_) {
    cumulative += weight;
    if (cumulative >= target) {
      cut = candidate;
      break;
    }
  }
  // Erasing by rank rather than sorting keeps the survivors in id order for draw().
  std::erase_if(candidates_, [&](const TokenLogit& c) { return ranks_before(cut, c); });
}

int32_t Sampler::draw() {
  float max_logit = kNegInf;
  for (const TokenLogit& c : candidates_) max_logit = std::max(max_logit, c.logit);
  // Drawing in id order makes the token a given random number maps to independent of how the
  // earlier steps happened to order the survivors.
  if (!std::is_sorted(candidates_.begin(), candidates_.end(), by_id)) {
    std::sort(candidates_.begin(), candidates_.end(), by_id);
  }
  // The random number is consumed even in degenerate cases so each call advances the sequence
  // by exactly one step.
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double u = uniform(rng_);
  if (!std::isfinite(max_logit)) {
    // All -inf, or some +inf: the lowest id at the maximum wins, as greedy would pick.
    for (const TokenLogit& c : candidates_) {
      if (c.logit == max_logit) return c.id;
    }
  }
  weights_.resize(candidates_.size());
  double total = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    // Divide rather than multiply by 1/temp: 1/temp overflows for tiny temperatures and 0 * inf
    // would turn the best token's weight into NaN.
    weights_[i] = std::exp((candidates_[i].logit - max_logit) / params_.temp);
    total += weights_[i];
  }
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last_possible = candidates_.front().id;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (weights_[i] <= 0.0f) continue;
    cumulative += weights_[i];
    last_possible = candidates_[i].id;
    if (cumulative > target) return last_possible;
  }
  return last_possible;  // rounding left the running sum a hair short of the total
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (logits.size() != static_cast<size_t>(n_vocab_)) {
    throw UsageError("sampler: got " + std::to_string(logits.size()) +
                     " logits for a vocabulary of " + std::to_string(n_vocab_));
  }
  const int32_t first = pick(logits);
  // The usual pick first: checking one token is cheap, masking the vocabulary is not.
  if (!filter_ || filter_->allows(first)) return first;
  // The chain keeps at most `want` tokens (1 when greedy, top_k), so only the `want` best
  // allowed ones need finding: the tokens are tried best first (after penalties) and every
  // other one is masked. Marking more than those is harmless (top_k drops them again); missing
  // one is not, so past the first ranks the rest are all tried.
  const bool use_top_k = params_.top_k > 0 && params_.top_k < n_vocab_;
  const size_t want = params_.temp <= 0.0f ? 1
                      : use_top_k          ? size_t(params_.top_k)
                                           : size_t(n_vocab_);
  rank_keys(logits);
  const size_t ranked = std::min<size_t>(size_t(n_vocab_), std::max<size_t>(want, 512));
  rank_best(ranked);
  masked_.assign(size_t(n_vocab_), kNegInf);
  size_t found = 0;
  const auto test = [&](int32_t t) {
    if (rank_key_[size_t(t)] == kNegInf || !filter_->allows(t)) return;
    masked_[size_t(t)] = logits[size_t(t)];
    ++found;
  };
  for (size_t i = 0; i < ranked && found < want; ++i) test(order_[i]);
  if (found < want)
    for (size_t i = ranked; i < order_.size(); ++i) test(order_[i]);
  return found > 0 ? pick(masked_) : -1;
}

void Sampler::rank_keys(std::span<const float> logits) {
  compute_penalized(logits);
  rank_key_.assign(logits.begin(), logits.end());
  for (float& v : rank_key_) v = sanitize(v);
  for (const TokenLogit& p : penalized_) rank_key_[size_t(p.id)] = p.logit;
}

void Sampler::rank_best(size_t k) {
  order_.resize(size_t(n_vocab_));
  for (int32_t t = 0; t < n_vocab_; ++t) order_[size_t(t)] = t;
  std::partial_sort(order_.begin(), order_.begin() + std::ptrdiff_t(k), order_.end(),
                    [&](int32_t a, int32_t b) {
                      return rank_key_[size_t(a)] > rank_key_[size_t(b)] ||
                             (rank_key_[size_t(a)] == rank_key_[size_t(b)] && a < b);
                    });
}

float Sampler::logprobs(std::span<const float> logits, int32_t chosen, int n_top,
                        std::vector<TokenLogit>& top) {
  rank_keys(logits);
  if (filter_)
    for (int32_t t = 0; t < n_vocab_; ++t)
      if (rank_key_[size_t(t)] != kNegInf && !filter_->allows(t)) rank_key_[size_t(t)] = kNegInf;
  float max = kNegInf;
  for (float v : rank_key_) max = std::max(max, v);
  double sum = 0;
  if (max != kNegInf)
    for (float v : rank_key_) sum += std::exp(double(v) - double(max));
  const double log_z = max == kNegInf ? 0.0 : double(max) + std::log(sum);
  const auto lp = [&](int32_t t) {
    const float v = rank_key_[size_t(t)];
    return v == kNegInf ? kNegInf : float(double(v) - log_z);
  };
  top.clear();
  const size_t k = std::min<size_t>(size_t(std::max(n_top, 0)), size_t(n_vocab_));
  if (k > 0) {
    rank_best(k);
    for (size_t i = 0; i < k; ++i)
      if (rank_key_[size_t(order_[i])] != kNegInf) top.push_back({order_[i], lp(order_[i])});
  }
  return chosen >= 0 && chosen < n_vocab_ ? lp(chosen) : kNegInf;
}

int32_t Sampler::pick(std::span<const float> logits) {
  compute_penalized(logits);
  if (params_.temp <= 0.0f) {
    select_top(logits, 1);
    return candidates_.front().id;
  }
  const bool use_top_k = params_.top_k > 0 && params_.top_k < n_vocab_;
  if (use_top_k) {
    select_top(logits, static_cast<size_t>(params_.top_k));
  } else {
    fill_all_candidates(logits);
  }
  apply_nucleus(use_top_k);
  return draw();
}

}  // namespace ps
