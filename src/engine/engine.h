#pragma once
// The engine every front end drives (`run`, `serve`): it owns a ModelContext and one thread that
// serves requests from a bounded queue in slots, each busy slot a Sequence of the context with
// KV cells from its one pool. Each step is one forward pass over every busy slot: the next token
// of each generating slot and chunks of prompts (up to -b tokens in all), so the weights are read
// once for all of them (one pass per slot where a device lacks batched attention). Front ends
// submit a request and read its events from a Stream (text pieces with their token ids, then one
// final event with usage, timings and the stop reason), and can cancel it: a cancelled request
// leaves its slot and returns its cells within one step.
//
// Cells: a request starts when a slot is free and the pool can give its whole prompt cells;
// until then it waits in the queue. A generating sequence takes a block more as it grows; when
// none is left it stops with "length". A finished request's sequence stays cached with its cells
// (least recently used given up first when cells or sequence ids run short), so a request whose
// prompt repeats a cached one's tokens evaluates only the rest, whichever slot takes it.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/model_context.h"
#include "engine/sequence.h"
#include "engine/text_stream.h"
#include "sampling/sampler.h"

namespace ps::grammar {
struct Grammar;
struct VocabPieces;
}  // namespace ps::grammar

namespace ps {

// How an embedding is made of a prompt's final hidden states (llama.cpp's pooling types): their
// mean, the first token's (cls), the last token's, or none (every token's, one after another).
enum class Pooling { none, mean, cls, last };
const char* pooling_name(Pooling p);

struct CompletionRequest {
  std::vector<int32_t> prompt;
  SamplerParams sampling;
  int max_tokens = -1;  // -1: until end of text or a full context
  std::vector<std::string> stop;
  bool ignore_eos = false;  // end-of-generation tokens are generated like any other
  // Log-probabilities with each token (Sampler::logprobs): -1 none; N >= 0, the token's and the
  // N most likely tokens'.
  int logprobs = -1;
  // Constrained decoding: only text of this grammar is generated (null: any).
  std::shared_ptr<const grammar::Grammar> grammar;
  // Without a grammar: tokens a <think> block may take before "</think>" is made to follow
  // (ThinkingBudget; -1: no bound); starts_thinking: the prompt opened the block.
  int thinking_budget = -1;
  bool starts_thinking = false;
  // An embedding instead of text: the prompt is evaluated in a sequence of its own (no cached
  // prefix, so every token's state is computed) and the final event carries the pooled
  // states; nothing is generated.
  bool embed = false;
  Pooling pooling = Pooling::mean;
};

// What the engine says about one request, in order: one event per generated token (its id and
// the text that became safe to send, which may be empty), then one final event.
struct StreamEvent {
  std::string text;
  int32_t token = -1;  // the generated token (-1 on the final event)
  // With CompletionRequest::logprobs: the token's log-probability and the most likely ones.
  bool has_logprob = false;
  float logprob = 0;
  std::vector<TokenLogit> top_logprobs;
  bool done = false;
  // The final event: "stop" or "length"; "error" with `error`; "cancelled".
  std::string finish_reason;
  // In words: "end of text", "stop string", "token limit", "context full", ...
  std::string stop_detail;
  std::string error;
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  // The final event of an embedding request: n_embd values (Pooling::none: n_embd per prompt
  // token), not normalized.
  std::vector<float> embedding;
  // The final event: seconds from the request's start to its first token's logits (the
  // prompt), then to its end (generation), over decode_steps passes; bytes copied between
  // devices in those passes and the time the copies took.
  double prompt_seconds = 0, generation_seconds = 0;
  int decode_steps = 0;
  size_t transfer_bytes = 0;
  double transfer_seconds = 0;
};

class Stream {
 public:
  void push(StreamEvent e);
  // The next event, waiting at most `timeout`; nullopt on timeout.
  std::optional<StreamEvent> pop(std::chrono::milliseconds timeout);
  // The reader is gone: the engine stops the request at its next step (Engine::cancel also
  // wakes the engine).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  std::atomic<bool> cancelled_{false};
};

struct EngineStats {
  uint64_t prompt_tokens = 0, generated_tokens = 0, requests = 0;
  uint64_t cached_tokens = 0;  // prompt tokens taken from cached sequences instead of evaluated
  // What the finished requests' usage reported (prompt tokens, cached ones included, and the
  // tokens generated), cancelled ones too.
  uint64_t usage_prompt_tokens = 0, usage_completion_tokens = 0;
  double busy_seconds = 0;  // time the engine spent on forward passes
  int queue_length = 0, busy_slots = 0, n_slots = 0;
  // The KV pool: all cells, those of running sequences and those of cached ones.
  int64_t kv_cells = 0, kv_cells_running = 0, kv_cells_cached = 0;
  int cached_sequences = 0;
};

class Engine {
 public:
  // n_slots sequences at once (opts.n_seq is set to n_slots, opts.n_seq_cached to the sequences
  // kept for reuse beside them); at most max_queue requests wait for a slot.
  Engine(std::shared_ptr<const LoadedModel> model, ContextOptions opts, int n_slots, int max_queue);
  ~Engine();
  const ModelContext& context() const { return *ctx_; }
  // Queues a request; nullptr when the queue is full or the engine stopped. UsageError when the
  // prompt is empty or leaves no room for one generated token in a slot.
  std::shared_ptr<Stream> submit(CompletionRequest req);
  // Ends the request within one step; its reader gets a final "cancelled" event.
  void cancel(const std::shared_ptr<Stream>& stream);
  int n_ctx() const { return ctx_->n_ctx(); }
  // Control tokens whose text is part of the replies (a chat format's tool-call marks, which
  // are read out of the text), and which grammars may therefore ask for. Call before the first
  // submit.
  void show_tokens(const std::vector<int32_t>& ids);
  // The context's warm-up before the first request (ModelContext::warm_up).
  double warm_up_seconds() const { return warm_up_seconds_; }
  EngineStats stats() const;
  // Stops the thread: requests waiting or in flight end with an error event.
  void stop();

 private:
  // A sequence with what a later request can reuse of it: its history (the tokens its cells
  // hold) and the logits after its last prompt's final token, valid for history[0,
  // prompt_logits_at): a prompt repeated exactly starts from them, so its answer does not depend
  // on the cache (evaluating only its last token again would round differently from the whole
  // batch).
  struct Kept {
    std::unique_ptr<Sequence> seq;
    std::vector<float> prompt_logits;
    size_t prompt_logits_at = 0;
    std::chrono::steady_clock::time_point last_used;
  };
  struct Slot {
    Kept kept;  // the sequence while busy
    bool busy = false;
    // The request in the slot.
    CompletionRequest req;
    std::shared_ptr<Stream> stream;
    std::unique_ptr<TextStream> text;
    size_t prompt_done = 0;  // prompt tokens evaluated
    std::vector<float> logits;
    bool ready = false;    // logits holds the next token's distribution: sample it
    int32_t pending = -1;  // a sampled token to evaluate in the next pass
    int generated = 0, cached_tokens = 0;
    std::vector<float> pooled;  // an embedding request's states so far (summed for the mean)
    std::chrono::steady_clock::time_point started, first_logits;
    int decode_steps = 0;
    size_t transfer_bytes = 0;
    double transfer_seconds = 0;
  };
  struct Waiting {
    CompletionRequest req;
    std::shared_ptr<Stream> stream;
  };
  void loop();
  // Moves waiting requests into free slots while the pool has cells for their prompts (under
  // the lock).
  void admit();
  // The sequence for a prompt: the cached one sharing its longest prefix, else a new one;
  // rewound to what it can reuse. Null when no sequence id is free.
  Kept take_sequence(const std::vector<int32_t>& prompt, size_t& reuse, bool& repeat);
  // Gives up the least recently used cached sequence and its cells; false when none is cached.
  bool evict_one();
  // Makes sure seq has cells for n positions, giving up cached sequences as needed.
  bool reserve(Sequence& seq, int n);
  void start(Slot& s, Kept kept, size_t reuse, bool repeat, Waiting w);
  // One forward pass over every busy slot (Sequence::eval_batch).
  void step();
  // Picks the slot's next token from its logits: sent out, or the request finishes.
  void sample(Slot& s);
  void finish(Slot& s, const std::string& reason, const std::string& detail);
  // An embedding request's states for `n` more prompt tokens (n x n_embd): pooled, and the
  // request finished with its embedding once the prompt is done.
  void take_states(Slot& s, const std::vector<float>& states, size_t n);
  // The slot is free again (under the lock: submit() and stats() read it); its sequence is
  // cached (keep) or dropped with its cells.
  void release(Slot& s, bool keep);
  // The pool's figures for stats(), taken on the engine thread (_locked: m_ held).
  void update_kv_stats();
  void update_kv_stats_locked();

  double warm_up_seconds_ = 0;
  std::unique_ptr<ModelContext> ctx_;
  const Tokenizer* tok_;
  // The vocabulary's pieces for grammar filters, made at the first request with a grammar.
  std::shared_ptr<const grammar::VocabPieces> pieces_;
  std::vector<bool> shown_;  // show_tokens: by id (empty: none)
  int max_queue_;
  // A test hook (POLYSTACK_TEST_STEP_DELAY_MS): a pause after each step, so that tests can
  // act while a request is still generating.
  std::chrono::milliseconds step_delay_{0};
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<Waiting> waiting_;
  std::vector<Slot> slots_;
  std::vector<Kept> cache_;  // idle sequences, in no order
  bool stopping_ = false;
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace ps
