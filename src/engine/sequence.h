#pragma once
// One sequence of tokens on a ModelContext: its KV cells (a sequence id of the context), its
// position, the tokens those cells hold and the sampler that picks its next token. Sequences are
// created and dropped freely; many share one context. Not thread-safe: one owner drives it (the
// engine's loop, or a command).
#include <memory>
#include <span>
#include <vector>

#include "engine/model_context.h"
#include "sampling/sampler.h"

namespace ps {

class Sequence {
 public:
  // Takes free KV cells of ctx; UsageError when every sequence the context holds is live.
  explicit Sequence(ModelContext& ctx);
  ~Sequence();
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  int id() const { return id_; }
  // Positions evaluated: the next token's position.
  int position() const { return ctx_.n_past(id_); }
  // The tokens whose keys and values the cells hold, in order.
  const std::vector<int32_t>& history() const { return history_; }
  // Feeds tokens after the history; the last token's logits (every token's with all_logits).
  std::vector<float> eval(std::span<const int32_t> tokens, bool all_logits = false);
  // Keeps the first n tokens; false (and nothing changed) when a sliding-window layer's ring no
  // longer holds what position n would attend to.
  bool rewind(int n);
  void clear();

  void set_sampler(std::unique_ptr<Sampler> s) { sampler_ = std::move(s); }
  Sampler* sampler() { return sampler_.get(); }

  // Tokens of several sequences in one forward pass (ModelContext::eval_batch); each run's last
  // logits (with `hidden`, its tokens' final hidden states), and each history extended.
  struct Run {
    Sequence* seq;
    std::span<const int32_t> tokens;
    bool hidden = false;
  };
  static std::vector<std::vector<float>> eval_batch(ModelContext& ctx, std::span<const Run> runs);

 private:
  ModelContext& ctx_;
  int id_;
  std::vector<int32_t> history_;
  std::unique_ptr<Sampler> sampler_;
};

}  // namespace ps
