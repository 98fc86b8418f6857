#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "engine/thinking.h"
#include "grammar/token_filter.h"
#include "tokenizer/tokenizer.h"

namespace ps {
namespace {

// A request's final event that carries no usage: "cancelled" (why = the words), or "error" (why =
// the message).
StreamEvent ended(const std::string& reason, const std::string& why) {
  StreamEvent e;
  e.done = true;
  e.finish_reason = reason;
  (reason == "error" ? e.error : e.stop_detail) = why;
  return e;
}

// How many leading tokens a and b share.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::none:
      return "none";
    case Pooling::mean:
      return "mean";
    case Pooling::cls:
      return "cls";
    case Pooling::last:
      return "last";
  }
  return "?";
}

void Stream::push(StreamEvent e) {
  {
    std::lock_guard<std::mutex> lock(m_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::optional<StreamEvent> Stream::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(m_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  StreamEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

Engine::Engine(std::shared_ptr<const LoadedModel> model, ContextOptions opts, int n_slots,
               int max_queue)
    : tok_(model->tokenizer.get()), max_queue_(max_queue) {
  if (n_slots < 1) throw UsageError(fmt::format("{} slots: at least 1 is needed", n_slots));
  if (max_queue < 0) throw UsageError("the queue bound must be 0 or more");
  if (!tok_) throw UsageError("the engine needs the model's tokenizer");
  opts.n_seq = n_slots;
  // Finished sequences kept for reuse: a few per slot (their cells are what bounds them).
  opts.n_seq_cached = std::min(4 * n_slots, 256);
  ctx_ = std::make_unique<ModelContext>(std::move(model), opts);
  warm_up_seconds_ = ctx_->warm_up();
  slots_.resize(size_t(n_slots));
  stats_.n_slots = n_slots;
  update_kv_stats();
  if (const char* d = std::getenv("POLYSTACK_TEST_STEP_DELAY_MS"))
    step_delay_ = std::chrono::milliseconds(std::clamp(std::atoi(d), 0, 10000));
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  stop();
  // The sequences before the context they live in.
  slots_.clear();
  cache_.clear();
}

std::shared_ptr<Stream> Engine::submit(CompletionRequest req) {
  if (req.prompt.empty()) throw UsageError("the prompt has no tokens");
  if (int64_t(req.prompt.size()) >= ctx_->n_ctx())
    throw UsageError(fmt::format("the prompt has {} tokens but a sequence holds only {} (-c)",
                                 req.prompt.size(), ctx_->n_ctx()));
  auto stream = std::make_shared<Stream>();
  {
    std::lock_guard<std::mutex> lock(m_);
    if (stopping_) return nullptr;
    // Waiting requests beyond a free slot count against the bound.
    int free_slots = 0;
    for (const Slot& s : slots_) free_slots += !s.busy;
    if (int(waiting_.size()) >= max_queue_ + free_slots) return nullptr;
    waiting_.push_back({std::move(req), stream});
    ++stats_.requests;
  }
  cv_.notify_all();
  return stream;
}

void Engine::cancel(const std::shared_ptr<Stream>& stream) {
  if (!stream) return;
  {
    std::lock_guard<std::mutex> lock(m_);
    stream->cancel();
    // A request still waiting ends here; one in a slot at the loop's next step.
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
      if (it->stream == stream) {
        waiting_.erase(it);
        stream->push(ended("cancelled", "cancelled"));
        break;
      }
  }
  cv_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(m_);
  EngineStats s = stats_;
  s.queue_length = int(waiting_.size());
  s.busy_slots = 0;
  for (const Slot& sl : slots_) s.busy_slots += sl.busy;
  return s;
}

void Engine::update_kv_stats() {
  std::lock_guard<std::mutex> lock(m_);
  update_kv_stats_locked();
}

void Engine::update_kv_stats_locked() {
  const KvPool& pool = ctx_->kv_pool();
  int64_t cached = 0;
  for (const Kept& k : cache_) cached += pool.cells_of(k.seq->id());
  stats_.kv_cells = pool.total_cells();
  stats_.kv_cells_cached = cached;
  stats_.kv_cells_running = pool.used_cells() - cached;
  stats_.cached_sequences = int(cache_.size());
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Whatever is left ends with an error.
  const StreamEvent stopping = ended("error", "the server is stopping");
  for (Waiting& w : waiting_) w.stream->push(stopping);
  waiting_.clear();
  for (Slot& s : slots_)
    if (s.busy) {
      s.stream->push(stopping);
      s.busy = false;
      s.kept = Kept{};
    }
}

bool Engine::evict_one() {
  if (cache_.empty()) return false;
  auto oldest = std::min_element(cache_.begin(), cache_.end(), [](const Kept& a, const Kept& b) {
    return a.last_used < b.last_used;
  });
  cache_.erase(oldest);  // the sequence's cells go back to the pool
  return true;
}

bool Engine::reserve(Sequence& seq, int n) {
  while (!ctx_->reserve(seq.id(), n))
    if (!evict_one()) return false;
  return true;
}

Engine::Kept Engine::take_sequence(const std::vector<int32_t>& p, size_t& reuse, bool& repeat) {
  // The cached sequence sharing the longest prefix with the prompt (the most recent of equals),
  // when the prompt continues it or half of the prompt is in it: taking a sequence over forgets
  // the rest of its tokens, which its conversation's next turn would have reused, so a prompt
  // that shares only a start (a BOS token) takes a sequence of its own.
  size_t best = cache_.size(), best_common = 0;
  for (size_t i = 0; i < cache_.size(); ++i) {
    const size_t c = common_prefix(cache_[i].seq->history(), p);
    if (c == 0 || (c < cache_[i].seq->history().size() && 2 * c < p.size())) continue;
    if (c > best_common ||
        (c == best_common && best < cache_.size() && cache_[i].last_used > cache_[best].last_used))
      best = i, best_common = c;
  }
  Kept k;
  if (best < cache_.size()) {
    k = std::move(cache_[best]);
    cache_.erase(cache_.begin() + ptrdiff_t(best));
  } else {
    if (ctx_->live_sequences() >= ctx_->n_seq() && !evict_one()) return k;
    k.seq = std::make_unique<Sequence>(*ctx_);
  }
  // Keep the common prefix (all but the last prompt token at most, whose logits are needed),
  // where the sequence's ring caches still hold it.
  size_t common = common_prefix(k.seq->history(), p);
  repeat = common == p.size() && k.prompt_logits_at == p.size() && k.seq->rewind(int(common));
  if (!repeat) {
    common = std::min(common, p.size() - 1);
    if (!k.seq->rewind(int(common))) {
      common = 0;
      k.seq->clear();
    }
    if (common < k.prompt_logits_at) k.prompt_logits_at = 0;
  }
  reuse = common;
  return k;
}

void Engine::admit() {
  while (!waiting_.empty()) {
    if (waiting_.front().stream->cancelled()) {
      waiting_.pop_front();
      continue;
    }
    Slot* slot = nullptr;
    bool any_busy = false;
    for (Slot& s : slots_) {
      if (!s.busy && !slot) slot = &s;
      any_busy = any_busy || s.busy;
    }
    if (!slot) return;
    const std::vector<int32_t>& p = waiting_.front().req.prompt;
    size_t reuse = 0;
    bool repeat = false;
    Kept k;
    if (!waiting_.front().req.embed)
      k = take_sequence(p, reuse, repeat);
    else if (ctx_->live_sequences() < ctx_->n_seq() || evict_one())
      k.seq = std::make_unique<Sequence>(*ctx_);  // every state is needed: no cached prefix
    // Cells for the whole prompt now, so its chunks never wait for cells.
    if (k.seq && reserve(*k.seq, int(p.size()))) {
      Waiting w = std::move(waiting_.front());
      waiting_.pop_front();
      stats_.cached_tokens += reuse;
      start(*slot, std::move(k), reuse, repeat, std::move(w));
      continue;
    }
    if (k.seq && !k.seq->history().empty()) {  // still worth keeping
      k.last_used = std::chrono::steady_clock::now();
      cache_.push_back(std::move(k));
    }
    if (any_busy) return;  // cells come back as running requests end
    // Nothing runs and nothing cached is left to give up: the prompt can never have its cells.
    Waiting w = std::move(waiting_.front());
    waiting_.pop_front();
    w.stream->push(ended(
        "error", fmt::format("the prompt's {} tokens need more KV cells than the pool's {} (-c)",
                             p.size(), ctx_->n_cells())));
  }
}

void Engine::show_tokens(const std::vector<int32_t>& ids) {
  shown_.assign(size_t(tok_->n_vocab()), false);
  for (const int32_t id : ids)
    if (id >= 0 && id < tok_->n_vocab()) shown_[size_t(id)] = true;
  pieces_.reset();
}

void Engine::start(Slot& s, Kept kept, size_t reuse, bool repeat, Waiting w) {
  s.busy = true;
  s.kept = std::move(kept);
  s.req = std::move(w.req);
  s.stream = std::move(w.stream);
  Sequence& seq = *s.kept.seq;
  s.pooled.clear();
  if (s.req.embed) {  // nothing to sample
    s.text = std::make_unique<TextStream>(s.req.stop);
    s.generated = s.decode_steps = 0;
    s.transfer_bytes = 0;
    s.transfer_seconds = 0;
    s.started = std::chrono::steady_clock::now();
    s.pending = -1;
    s.ready = false;
    s.prompt_done = 0;
    s.cached_tokens = 0;
    return;
  }
  seq.set_sampler(std::make_unique<Sampler>(s.req.sampling, tok_->n_vocab()));
  if (s.req.grammar || s.req.thinking_budget >= 0)
    if (!pieces_) pieces_ = grammar::VocabPieces::of(*tok_, shown_);
  if (s.req.grammar)
    seq.sampler()->set_filter(std::make_unique<grammar::GrammarFilter>(s.req.grammar, pieces_));
  else if (s.req.thinking_budget >= 0)
    seq.sampler()->set_filter(
        std::make_unique<ThinkingBudget>(pieces_, s.req.thinking_budget, s.req.starts_thinking));
  s.text = std::make_unique<TextStream>(s.req.stop);
  s.generated = 0;
  s.decode_steps = 0;
  s.transfer_bytes = 0;
  s.transfer_seconds = 0;
  s.started = std::chrono::steady_clock::now();
  s.pending = -1;
  s.ready = repeat;
  if (repeat) {
    s.logits = s.kept.prompt_logits;
    s.first_logits = s.started;
  }
  s.prompt_done = reuse;
  s.cached_tokens = int(reuse);
  for (int32_t t : s.req.prompt) seq.sampler()->accept(t);
}

void Engine::finish(Slot& s, const std::string& reason, const std::string& detail) {
  const std::string rest = s.text->finish();
  if (!rest.empty()) {
    StreamEvent e;
    e.text = rest;
    s.stream->push(std::move(e));
  }
  StreamEvent done;
  done.done = true;
  done.finish_reason = reason;
  done.stop_detail = detail;
  done.prompt_tokens = int(s.req.prompt.size());
  done.completion_tokens = s.generated;
  done.cached_tokens = s.cached_tokens;
  const auto now = std::chrono::steady_clock::now();
  done.prompt_seconds = std::chrono::duration<double>(s.first_logits - s.started).count();
  done.generation_seconds = std::chrono::duration<double>(now - s.first_logits).count();
  done.decode_steps = s.decode_steps;
  done.transfer_bytes = s.transfer_bytes;
  done.transfer_seconds = s.transfer_seconds;
  {
    std::lock_guard<std::mutex> lock(m_);
    stats_.usage_prompt_tokens += uint64_t(done.prompt_tokens);
    stats_.usage_completion_tokens += uint64_t(done.completion_tokens);
  }
  // The slot is free before the reader hears that the request is done.
  const std::shared_ptr<Stream> stream = s.stream;
  release(s, true);
  stream->push(std::move(done));
}

void Engine::take_states(Slot& s, const std::vector<float>& states, size_t n) {
  const size_t n_embd = states.size() / std::max<size_t>(n, 1);
  const bool first = s.prompt_done == 0;
  s.prompt_done += n;
  switch (s.req.pooling) {
    case Pooling::none:
      s.pooled.insert(s.pooled.end(), states.begin(), states.end());
      break;
    case Pooling::mean:
      s.pooled.resize(n_embd, 0.0f);
      for (size_t t = 0; t < n; ++t)
        for (size_t j = 0; j < n_embd; ++j) s.pooled[j] += states[t * n_embd + j];
      break;
    case Pooling::cls:
      if (first) s.pooled.assign(states.begin(), states.begin() + ptrdiff_t(n_embd));
      break;
    case Pooling::last:
      s.pooled.assign(states.end() - ptrdiff_t(n_embd), states.end());
      break;
  }
  if (s.prompt_done < s.req.prompt.size()) return;
  if (s.req.pooling == Pooling::mean)
    for (float& v : s.pooled) v /= float(s.req.prompt.size());
  StreamEvent done;
  done.done = true;
  done.finish_reason = "stop";
  done.stop_detail = "embedding";
  done.prompt_tokens = int(s.req.prompt.size());
  done.embedding = std::move(s.pooled);
  s.pooled.clear();
  done.prompt_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - s.started).count();
  {
    std::lock_guard<std::mutex> lock(m_);
    stats_.usage_prompt_tokens += uint64_t(done.prompt_tokens);
  }
  // Its cells go back: a cached sequence of embedded text would push out conversations.
  const std::shared_ptr<Stream> stream = s.stream;
  release(s, false);
  stream->push(std::move(done));
}

void Engine::release(Slot& s, bool keep) {
  std::lock_guard<std::mutex> lock(m_);
  s.busy = false;
  s.stream.reset();
  if (keep && s.kept.seq) {
    s.kept.last_used = std::chrono::steady_clock::now();
    cache_.push_back(std::move(s.kept));
  }
  s.kept = Kept{};
  update_kv_stats_locked();
}

void Engine::sample(Slot& s) {
  s.ready = false;
  Sequence& seq = *s.kept.seq;
  Sampler& sampler = *seq.sampler();
  const int32_t id = sampler.sample(s.logits);
  if (id < 0) return finish(s, "stop", "no token of the vocabulary fits the grammar");
  StreamEvent e;
  if (s.req.logprobs >= 0 && !tok_->is_eog(id)) {
    e.has_logprob = true;
    e.logprob = sampler.logprobs(s.logits, id, s.req.logprobs, e.top_logprobs);
  }
  sampler.accept(id);
  if (sampler.filter()) sampler.filter()->accept(id);
  if (tok_->is_eog(id) && !s.req.ignore_eos) return finish(s, "stop", "end of text");
  ++s.generated;
  e.token = id;
  e.text = s.text->add(tok_->token_to_piece(id, !shown_.empty() && shown_[size_t(id)]));
  s.stream->push(std::move(e));
  if (s.text->stopped()) return finish(s, "stop", "stop string");
  if (seq.position() >= ctx_->n_ctx()) return finish(s, "length", "context full");
  if (s.req.max_tokens >= 0 && s.generated >= s.req.max_tokens)
    return finish(s, "length", "token limit");
  // The token's cells: a block more when it starts one, giving up cached sequences first.
  if (!reserve(seq, seq.position() + 1))
    return finish(s, "length", fmt::format("KV pool full ({} cells, -c)", ctx_->n_cells()));
  s.pending = id;
}

void Engine::step() {
  // Slots with logits in hand pick their next token (or finish).
  for (Slot& s : slots_) {
    if (!s.busy) continue;
    if (s.stream->cancelled()) {
      const std::shared_ptr<Stream> stream = s.stream;
      StreamEvent e = ended("cancelled", "cancelled");
      e.prompt_tokens = int(s.req.prompt.size());
      e.completion_tokens = s.generated;
      e.cached_tokens = s.cached_tokens;
      // The timings so far, for a reader that reports them (run's Ctrl-C).
      const auto now = std::chrono::steady_clock::now();
      const bool prompt_over = s.prompt_done >= s.req.prompt.size();
      e.prompt_seconds =
          std::chrono::duration<double>((prompt_over ? s.first_logits : now) - s.started).count();
      e.generation_seconds =
          prompt_over ? std::chrono::duration<double>(now - s.first_logits).count() : 0.0;
      e.decode_steps = s.decode_steps;
      {
        std::lock_guard<std::mutex> lock(m_);
        stats_.usage_prompt_tokens += uint64_t(e.prompt_tokens);
        stats_.usage_completion_tokens += uint64_t(e.completion_tokens);
      }
      release(s, false);  // its cells go back
      stream->push(std::move(e));
      continue;
    }
    if (s.ready) sample(s);
  }
  // One forward pass for all: each generating slot's token, then prompt chunks in slot order
  // while the batch has room.
  struct Run {
    Slot* slot;
    bool prompt;
  };
  std::vector<Sequence::Run> runs;
  std::vector<Run> owners;
  int budget = ctx_->n_batch();
  for (Slot& s : slots_)
    if (s.busy && s.pending >= 0) {
      runs.push_back({s.kept.seq.get(), std::span<const int32_t>(&s.pending, 1)});
      owners.push_back({&s, false});
      --budget;
    }
  for (Slot& s : slots_)
    if (s.busy && !s.ready && s.pending < 0 && s.prompt_done < s.req.prompt.size() && budget > 0) {
      const size_t n = std::min(s.req.prompt.size() - s.prompt_done, size_t(budget));
      runs.push_back({s.kept.seq.get(),
                      std::span<const int32_t>(s.req.prompt.data() + s.prompt_done, n),
                      s.req.embed});
      owners.push_back({&s, true});
      budget -= int(n);
    }
  if (runs.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<float>> logits;
  try {
    logits = Sequence::eval_batch(*ctx_, runs);
  } catch (const std::exception& e) {
    for (const Run& o : owners) {
      const std::shared_ptr<Stream> stream = o.slot->stream;
      release(*o.slot, false);
      stream->push(ended("error", e.what()));
    }
    return;
  }
  const auto t1 = std::chrono::steady_clock::now();
  uint64_t prompt_tokens = 0, generated = 0;
  for (size_t i = 0; i < owners.size(); ++i) {
    Slot& s = *owners[i].slot;
    if (s.req.embed) {
      prompt_tokens += runs[i].tokens.size();
      take_states(s, logits[i], runs[i].tokens.size());
      continue;
    }
    if (owners[i].prompt) {
      s.prompt_done += runs[i].tokens.size();
      prompt_tokens += runs[i].tokens.size();
      if (s.prompt_done < s.req.prompt.size()) continue;
      s.kept.prompt_logits = logits[i];
      s.kept.prompt_logits_at = s.kept.seq->history().size();
      s.first_logits = t1;
    } else {
      s.pending = -1;
      ++generated;
      ++s.decode_steps;
      s.transfer_bytes += ctx_->transfer_bytes();
      s.transfer_seconds += ctx_->transfer_seconds();
    }
    s.logits = std::move(logits[i]);
    s.ready = true;
  }
  std::lock_guard<std::mutex> lock(m_);
  stats_.prompt_tokens += prompt_tokens;
  stats_.generated_tokens += generated;
  stats_.busy_seconds += std::chrono::duration<double>(t1 - t0).count();
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] {
        if (stopping_ || !waiting_.empty()) return true;
        return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy; });
      });
      if (stopping_) return;
      admit();
    }
    step();
    update_kv_stats();
    if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
  }
}

}  // namespace ps
