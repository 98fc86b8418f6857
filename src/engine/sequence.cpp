#include "engine/sequence.h"

#include <fmt/format.h>

#include "core/error.h"

namespace ps {

Sequence::Sequence(ModelContext& ctx) : ctx_(ctx), id_(ctx.acquire_sequence()) {
  if (id_ < 0)
    throw UsageError(
        fmt::format("no free sequence: all {} of the context are in use", ctx.n_seq()));
  // Whatever an earlier sequence left in these cells is not ours.
  ctx_.reset(id_);
}

Sequence::~Sequence() { ctx_.release_sequence(id_); }

std::vector<float> Sequence::eval(std::span<const int32_t> tokens, bool all_logits) {
  std::vector<float> out = ctx_.eval(tokens, all_logits, id_);
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  return out;
}

bool Sequence::rewind(int n) {
  if (n < 0 || size_t(n) > history_.size() || !ctx_.rewind(id_, n)) return false;
  history_.resize(size_t(n));
  return true;
}

void Sequence::clear() {
  ctx_.reset(id_);
  history_.clear();
}

std::vector<std::vector<float>> Sequence::eval_batch(ModelContext& ctx, std::span<const Run> runs) {
  std::vector<ModelContext::SeqTokens> st;
  st.reserve(runs.size());
  for (const Run& r : runs) {
    if (&r.seq->ctx_ != &ctx) throw UsageError("a sequence of another context in the batch");
    st.push_back({r.seq->id_, r.tokens, r.hidden});
  }
  std::vector<std::vector<float>> out = ctx.eval_batch(st);
  for (const Run& r : runs)
    r.seq->history_.insert(r.seq->history_.end(), r.tokens.begin(), r.tokens.end());
  return out;
}

}  // namespace ps
