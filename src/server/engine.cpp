#include "server/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <thread>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace ps::server {
namespace {

// Bytes of the UTF-8 character a lead byte starts (1 for a stray continuation byte, so
// invalid input still moves on).
size_t utf8_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

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

std::string TextStream::add(const std::string& bytes) {
  if (stopped_) return {};
  partial_ += bytes;
  // The whole characters at the front of partial_ move to held_.
  size_t at = 0;
  while (at < partial_.size()) {
    const size_t n = utf8_length(static_cast<unsigned char>(partial_[at]));
    if (at + n > partial_.size()) break;
    at += n;
  }
  held_ += partial_.substr(0, at);
  partial_.erase(0, at);
  size_t cut = std::string::npos;
  for (const std::string& s : stop_)
    if (!s.empty()) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    partial_.clear();
    return out;
  }
  // Keep the longest tail that begins a stop string (on a character boundary).
  size_t keep = 0;
  for (const std::string& s : stop_)
    for (size_t n = std::min(s.size() - (s.empty() ? 0 : 1), held_.size()); n > keep; --n)
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  while (keep > 0 && keep < held_.size() &&
         (static_cast<unsigned char>(held_[held_.size() - keep]) & 0xC0) == 0x80)
    ++keep;
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TextStream::finish() {
  if (stopped_) return {};
  std::string out = held_ + partial_;
  held_.clear();
  partial_.clear();
  return out;
}

Engine::Engine(std::shared_ptr<const LoadedModel> model, SessionOptions opts, int n_slots,
               int max_queue)
    : tok_(model->tokenizer.get()), max_queue_(max_queue) {
  if (n_slots < 1) throw UsageError(fmt::format("{} slots: at least 1 is needed", n_slots));
  if (max_queue < 0) throw UsageError("the queue bound must be 0 or more");
  opts.n_seq = n_slots;
  session_ = std::make_unique<Session>(std::move(model), opts);
  slots_.resize(size_t(n_slots));
  for (int i = 0; i < n_slots; ++i) slots_[size_t(i)].seq = i;
  stats_.n_slots = n_slots;
  if (const char* d = std::getenv("POLYSTACK_TEST_STEP_DELAY_MS"))
    step_delay_ = std::chrono::milliseconds(std::clamp(std::atoi(d), 0, 10000));
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { stop(); }

std::shared_ptr<Stream> Engine::submit(CompletionRequest req) {
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
  for (Waiting& w : waiting_) w.stream->push({"", true, "error", "the server is stopping"});
  waiting_.clear();
  for (Slot& s : slots_)
    if (s.busy) {
      s.stream->push({"", true, "error", "the server is stopping"});
      s.busy = false;
    }
}

void Engine::start(Slot& s, Waiting w) {
  s.busy = true;
  s.req = std::move(w.req);
  s.stream = std::move(w.stream);
  s.sampler = std::make_unique<Sampler>(s.req.sampling, tok_->n_vocab());
  s.text = std::make_unique<TextStream>(s.req.stop);
  s.generated = 0;
  // The prompt cache: keep the common prefix (all but the last prompt token at most, whose
  // logits are needed), where the slot's ring caches still hold it.
  const auto& p = s.req.prompt;
  size_t common = common_prefix(s.cached, p);
  s.pending = -1;
  s.ready = false;
  if (common == p.size() && s.prompt_logits_at == p.size() &&
      session_->rewind(s.seq, int(common))) {
    s.logits = s.prompt_logits;
    s.ready = true;
  } else {
    common = std::min(common, p.size() - 1);
    if (!session_->rewind(s.seq, int(common))) {
      common = 0;
      session_->reset(s.seq);
    }
    if (common < s.prompt_logits_at) s.prompt_logits_at = 0;
  }
  s.cached.resize(common);
  s.prompt_done = common;
  s.cached_tokens = int(common);
  for (int32_t t : p) s.sampler->accept(t);
}

void Engine::finish(Slot& s, const std::string& reason) {
  const std::string rest = s.text->finish();
  if (!rest.empty()) s.stream->push({rest, false, "", ""});
  StreamEvent done;
  done.done = true;
  done.finish_reason = reason;
  done.prompt_tokens = int(s.req.prompt.size());
  done.completion_tokens = s.generated;
  done.cached_tokens = s.cached_tokens;
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
  const int32_t id = s.sampler->sample(s.logits);
  s.sampler->accept(id);
  if (tok_->is_eog(id)) return finish(s, "stop");
  ++s.generated;
  const std::string text = s.text->add(tok_->token_to_piece(id, false));
  if (!text.empty()) s.stream->push({text, false, "", ""});
  if (s.text->stopped()) return finish(s, "stop");
  if (s.req.max_tokens >= 0 && s.generated >= s.req.max_tokens) return finish(s, "length");
  if (session_->n_past(s.seq) >= session_->n_ctx()) return finish(s, "length");
  s.pending = id;
}

void Engine::step() {
  // Slots with logits in hand pick their next token (or finish).
  for (Slot& s : slots_) {
    if (!s.busy) continue;
    if (s.stream->cancelled()) {
      release(s);
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
  std::vector<Session::SeqTokens> runs;
  std::vector<Run> owners;
  int budget = session_->n_batch();
  for (Slot& s : slots_)
    if (s.busy && s.pending >= 0) {
      runs.push_back({s.seq, std::span<const int32_t>(&s.pending, 1)});
      owners.push_back({&s, false});
      --budget;
    }
  for (Slot& s : slots_)
    if (s.busy && !s.ready && s.pending < 0 && s.prompt_done < s.req.prompt.size() && budget > 0) {
      const size_t n = std::min(s.req.prompt.size() - s.prompt_done, size_t(budget));
      runs.push_back({s.seq, std::span<const int32_t>(s.req.prompt.data() + s.prompt_done, n)});
      owners.push_back({&s, true});
      budget -= int(n);
    }
  if (runs.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<float>> logits;
  try {
    logits = session_->eval_batch(runs);
  } catch (const std::exception& e) {
    for (const Run& o : owners) {
      const std::shared_ptr<Stream> stream = o.slot->stream;
      o.slot->cached.clear();
      o.slot->prompt_logits_at = 0;
      session_->reset(o.slot->seq);
      release(*o.slot);
      stream->push({"", true, "error", e.what()});
    }
    return;
  }
  uint64_t prompt_tokens = 0, generated = 0;
  for (size_t i = 0; i < owners.size(); ++i) {
    Slot& s = *owners[i].slot;
    s.cached.insert(s.cached.end(), runs[i].tokens.begin(), runs[i].tokens.end());
    if (owners[i].prompt) {
      s.prompt_done += runs[i].tokens.size();
      prompt_tokens += runs[i].tokens.size();
      if (s.prompt_done < s.req.prompt.size()) continue;
      s.prompt_logits = logits[i];
      s.prompt_logits_at = s.cached.size();
    } else {
      s.pending = -1;
      ++generated;
    }
    s.logits = std::move(logits[i]);
    s.ready = true;
  }
  std::lock_guard<std::mutex> lock(m_);
  stats_.prompt_tokens += prompt_tokens;
  stats_.generated_tokens += generated;
  stats_.busy_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
          const size_t c = common_prefix(s.cached, p);
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
      }
    }
    step();
    if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
  }
}

}  // namespace ps::server
