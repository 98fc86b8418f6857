#pragma once
// Logits -> token id, following llama.cpp's default sampler chain:
//   penalties -> top_k -> top_p -> min_p -> temperature -> seeded draw.
// top_p and min_p see the distribution at temperature 1 (temperature comes after them, as in
// llama.cpp), so changing the temperature never changes which tokens are eligible.
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ps {

struct SamplerParams {
  float temp = 0.8f;               // <= 0: greedy (argmax after penalties, ties -> lowest id)
  int32_t top_k = 40;              // <= 0 or >= n_vocab: off
  float top_p = 0.95f;             // 1: off; keeps the smallest prefix with probability >= top_p
  float min_p = 0.05f;             // 0: off; keeps tokens with prob >= min_p * max prob
  float repeat_penalty = 1.0f;     // 1: off; positive logits divided, negative ones multiplied
  int32_t repeat_last_n = 64;      // window of accepted tokens penalized; 0 off, -1 all since reset
  float frequency_penalty = 0.0f;  // subtracted once per occurrence in the window
  float presence_penalty = 0.0f;   // subtracted once if the token occurs in the window
  uint64_t seed = 0;
};

// Which tokens may come next, for constrained decoding (a grammar: grammar/token_filter.h).
class TokenFilter {
 public:
  virtual ~TokenFilter() = default;
  virtual bool allows(int32_t token) const = 0;
  // The token was generated: what may follow changes.
  virtual void accept(int32_t token) = 0;
};

// One token still in the running, with its logit after the steps applied so far.
struct TokenLogit {
  int32_t id;
  float logit;
};

class Sampler {
 public:
  // Throws UsageError when a parameter is out of range.
  Sampler(const SamplerParams& params, int32_t n_vocab);

  // Picks the next token. Does not record it: call accept() with the token actually used. With
  // a filter, a token it refuses is never picked: the draw is made again over the tokens it
  // allows (their logits as they were, every other one -inf); -1 when it allows none.
  int32_t sample(std::span<const float> logits);
  // Log-probabilities of the distribution the draw came from, before temperature and
  // truncation: log-softmax of the logits after the penalties, over the tokens the filter
  // allows (all without one). `chosen`'s, and the n_top most likely (best first, ties to the
  // lower id). Call before accept() and the filter's accept, with the logits sample() saw.
  float logprobs(std::span<const float> logits, int32_t chosen, int n_top,
                 std::vector<TokenLogit>& top);
  // A filter for the tokens sample() may pick (none: any); the caller tells it what was
  // generated (filter()->accept).
  void set_filter(std::unique_ptr<TokenFilter> f) { filter_ = std::move(f); }
  TokenFilter* filter() { return filter_.get(); }
  // Records a token for the repetition penalties.
  void accept(int32_t token);
  // Forgets accepted tokens and restarts the random sequence from the seed.
  void reset();

  const SamplerParams& params() const { return params_; }
  int32_t n_vocab() const { return n_vocab_; }

 private:
  bool penalties_active() const;
  // Penalized logits of the tokens in the window, sorted by id; empty when penalties are off.
  void compute_penalized(std::span<const float> logits);
  // Every token with its (penalized) logit, in id order.
  void fill_all_candidates(std::span<const float> logits);
  // The k best tokens after penalties, ranked; scans the logits once without sorting them.
  void select_top(std::span<const float> logits, size_t k);
  // Applies top_p and min_p to candidates_; `ranked` says candidates_ is already ranked.
  void apply_nucleus(bool ranked);
  int32_t draw();
  int32_t pick(std::span<const float> logits);
  // rank_key_: each token's logit after the penalties (what a filter's draws rank by).
  void rank_keys(std::span<const float> logits);
  // order_: the tokens, the k best by rank_key_ first (ties by id) and in order.
  void rank_best(size_t k);

  SamplerParams params_;
  int32_t n_vocab_;
  std::mt19937 rng_;
  std::deque<int32_t> history_;
  std::unordered_map<int32_t, int32_t> history_counts_;
  // Scratch reused across calls so a token costs no allocation once warmed up.
  std::vector<TokenLogit> penalized_;
  std::vector<TokenLogit> candidates_;
  std::vector<float> weights_;
  std::vector<double> bucket_mass_;
  std::vector<std::pair<TokenLogit, float>> boundary_;
  std::unique_ptr<TokenFilter> filter_;
  std::vector<float> masked_, rank_key_;
  std::vector<int32_t> order_;
};

}  // namespace ps
