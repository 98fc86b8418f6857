#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <thread>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace ps {
namespace {

// How many leading tokens a and b share.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

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
  ctx_ = std::make_unique<ModelContext>(std::move(model), opts);
  slots_.resize(size_t(n_slots));
  for (Slot& s : slots_) s.seq = std::make_unique<Sequence>(*ctx_);
  stats_.n_slots = n_slots;
  if (const char* d = std::getenv("POLYSTACK_TEST_STEP_DELAY_MS"))
    step_delay_ = std::chrono::milliseconds(std::clamp(std::atoi(d), 0, 10000));
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  stop();
  slots_.clear();  // the sequences before the context they live in
}

std::shared_ptr<Stream> Engine::submit(CompletionRequest req) {
  if (req.prompt.empty()) throw UsageError("the prompt has no tokens");
  if (int64_t(req.prompt.size()) >= ctx_->n_ctx())
    throw UsageError(fmt::format("the prompt has {} tokens but a slot holds only {} (-c)",
                                 req.prompt.size(), ctx_->n_ctx()));
  auto stream = std::make_shared<Stream>();
  {
    std::lock_guard<std::mutex> lock(m_);
    if (stopping_) return nullptr;
    // Waiting requests beyond a free slot count against the bound.
    int free_slots = 0;
    for (const Slot& s : slots_) free_slots += !s.busy;
    if (int(waiting_.size()) >= max_queue_ + free_slots) return nullptr;
    waiting_.push_back({std::move(req), stream, std::chrono::steady_clock::now()});
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
        StreamEvent e;
        e.done = true;
        e.finish_reason = "cancelled";
        e.stop_detail = "cancelled";
        stream->push(std::move(e));
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

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Whatever is left ends with an error.
  StreamEvent stopping;
  stopping.done = true;
  stopping.finish_reason = "error";
  stopping.error = "the server is stopping";
  for (Waiting& w : waiting_) w.stream->push(stopping);
  waiting_.clear();
  for (Slot& s : slots_)
    if (s.busy) {
      s.stream->push(stopping);
      s.busy = false;
    }
}

void Engine::start(Slot& s, Waiting w) {
  s.busy = true;
  s.req = std::move(w.req);
  s.stream = std::move(w.stream);
  s.seq->set_sampler(std::make_unique<Sampler>(s.req.sampling, tok_->n_vocab()));
  s.text = std::make_unique<TextStream>(s.req.stop);
  s.generated = 0;
  s.decode_steps = 0;
  s.transfer_bytes = 0;
  s.transfer_seconds = 0;
  s.started = std::chrono::steady_clock::now();
  // The prompt cache: keep the common prefix (all but the last prompt token at most, whose
  // logits are needed), where the slot's ring caches still hold it.
  const auto& p = s.req.prompt;
  size_t common = common_prefix(s.seq->history(), p);
  s.pending = -1;
  s.ready = false;
  if (common == p.size() && s.prompt_logits_at == p.size() && s.seq->rewind(int(common))) {
    s.logits = s.prompt_logits;
    s.ready = true;
    s.first_logits = s.started;
  } else {
    common = std::min(common, p.size() - 1);
    if (!s.seq->rewind(int(common))) {
      common = 0;
      s.seq->clear();
    }
    if (common < s.prompt_logits_at) s.prompt_logits_at = 0;
  }
  s.prompt_done = common;
  s.cached_tokens = int(common);
  for (int32_t t : p) s.seq->sampler()->accept(t);
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
  // The slot is free before the reader hears that the request is done.
  const std::shared_ptr<Stream> stream = s.stream;
  release(s);
  stream->push(std::move(done));
}

void Engine::release(Slot& s) {
  std::lock_guard<std::mutex> lock(m_);
  s.busy = false;
  s.stream.reset();
  s.last_used = std::chrono::steady_clock::now();
}

void Engine::sample(Slot& s) {
  s.ready = false;
  Sampler& sampler = *s.seq->sampler();
  const int32_t id = sampler.sample(s.logits);
  sampler.accept(id);
  if (tok_->is_eog(id) && !s.req.ignore_eos) return finish(s, "stop", "end of text");
  ++s.generated;
  StreamEvent e;
  e.token = id;
  e.text = s.text->add(tok_->token_to_piece(id, false));
  s.stream->push(std::move(e));
  if (s.text->stopped()) return finish(s, "stop", "stop string");
  if (s.seq->position() >= ctx_->n_ctx()) return finish(s, "length", "context full");
  if (s.req.max_tokens >= 0 && s.generated >= s.req.max_tokens)
    return finish(s, "length", "token limit");
  s.pending = id;
}

void Engine::step() {
  // Slots with logits in hand pick their next token (or finish).
  for (Slot& s : slots_) {
    if (!s.busy) continue;
    if (s.stream->cancelled()) {
      const std::shared_ptr<Stream> stream = s.stream;
      release(s);
      StreamEvent e;
      e.done = true;
      e.finish_reason = "cancelled";
      e.stop_detail = "cancelled";
      e.prompt_tokens = int(s.req.prompt.size());
      e.completion_tokens = s.generated;
      e.cached_tokens = s.cached_tokens;
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
      runs.push_back({s.seq.get(), std::span<const int32_t>(&s.pending, 1)});
      owners.push_back({&s, false});
      --budget;
    }
  for (Slot& s : slots_)
    if (s.busy && !s.ready && s.pending < 0 && s.prompt_done < s.req.prompt.size() && budget > 0) {
      const size_t n = std::min(s.req.prompt.size() - s.prompt_done, size_t(budget));
      runs.push_back(
          {s.seq.get(), std::span<const int32_t>(s.req.prompt.data() + s.prompt_done, n)});
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
      o.slot->seq->clear();
      o.slot->prompt_logits_at = 0;
      release(*o.slot);
      StreamEvent err;
      err.done = true;
      err.finish_reason = "error";
      err.error = e.what();
      stream->push(std::move(err));
    }
    return;
  }
  const auto t1 = std::chrono::steady_clock::now();
  uint64_t prompt_tokens = 0, generated = 0;
  for (size_t i = 0; i < owners.size(); ++i) {
    Slot& s = *owners[i].slot;
    if (owners[i].prompt) {
      s.prompt_done += runs[i].tokens.size();
      prompt_tokens += runs[i].tokens.size();
      if (s.prompt_done < s.req.prompt.size()) continue;
      s.prompt_logits = logits[i];
      s.prompt_logits_at = s.seq->history().size();
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
      // Waiting requests into free slots, in order: each to the idle slot sharing the longest
      // prefix with its prompt (then the one idle longest).
      while (!waiting_.empty()) {
        Slot* best = nullptr;
        size_t best_common = 0;
        const auto& p = waiting_.front().req.prompt;
        for (Slot& s : slots_) {
          if (s.busy) continue;
          const size_t c = common_prefix(s.seq->history(), p);
          if (!best || c > best_common || (c == best_common && s.last_used < best->last_used)) {
            best = &s;
            best_common = c;
          }
        }
        if (!best) break;
        Waiting w = std::move(waiting_.front());
        waiting_.pop_front();
        if (w.stream->cancelled()) continue;
        start(*best, std::move(w));
        stats_.cached_tokens += uint64_t(best->cached_tokens);
      }
    }
    step();
    if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
  }
}

}  // namespace ps
