// The engine on a real model (stories260K from ../shared) and its parts: text deltas that never
// split a UTF-8 character or leak part of a stop string; sequences taken from and returned to a
// context, with their history and rewinds; several requests at once in slots, each its own
// answer, a repeated prompt from the cache, cancellation (waiting, mid-prompt and
// mid-generation) freeing the slot with a final event, a full queue; and one event per token
// whose ids decode to the text.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "core/cpu_features.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "stories_model.h"
#include "tokenizer/tokenizer.h"

namespace ps {
namespace {

using test::on_cpu;
using test::stories;

TEST(TextStream, WholeCharactersOnly) {
  TextStream t({});
  const std::string euro = "\xE2\x82\xAC";  // U+20AC in three bytes, fed one at a time
  EXPECT_EQ(t.add(euro.substr(0, 1)), "");
  EXPECT_EQ(t.add(euro.substr(1, 1)), "");
  EXPECT_EQ(t.add(euro.substr(2, 1) + "a"), euro + "a");
  EXPECT_EQ(t.add("\xF0\x9F"), "");
  EXPECT_EQ(t.finish(), "\xF0\x9F");  // what is left goes out at the end, even if cut
}

TEST(TextStream, StopStringsAcrossPieces) {
  TextStream t({"END", "\n\n"});
  std::string out;
  for (const char* piece : {"Hello E", "N", "d E", "ND and more"}) {
    out += t.add(piece);
    if (t.stopped()) break;
  }
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(out, "Hello ENd ");  // "EN" held back until "d" showed it was not the stop
  EXPECT_EQ(t.add("x"), "");
  TextStream u({"\n\n"});
  EXPECT_EQ(u.add("a\n"), "a");
  EXPECT_EQ(u.add("b"), "\nb");
  EXPECT_EQ(u.finish(), "");
  EXPECT_FALSE(u.stopped());
}

struct Answer {
  std::string text;
  StreamEvent done;
};

Answer collect(Stream& s) {
  Answer a;
  for (;;) {
    auto e = s.pop(std::chrono::milliseconds(30000));
    if (!e) {
      ADD_FAILURE() << "no event within 30 s";
      return a;
    }
    if (e->done) {
      a.done = *e;
      return a;
    }
    a.text += e->text;
  }
}

CompletionRequest greedy(const Tokenizer& tok, const std::string& prompt, int n) {
  CompletionRequest r;
  r.prompt = tok.encode(prompt, true, true);
  r.sampling.temp = 0;
  r.max_tokens = n;
  return r;
}

TEST(Engine, SlotsServeRequestsSideBySide) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const Tokenizer& tok = *model->tokenizer;
  const ContextOptions o = on_cpu(512);
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily went"};
  std::vector<std::string> alone;
  {
    Engine one(model, o, 1, 8);
    for (const auto& p : prompts) alone.push_back(collect(*one.submit(greedy(tok, p, 20))).text);
  }
  Engine e(model, o, 3, 3);  // 3 slots and 3 waiting: all 6 taken
  std::vector<std::shared_ptr<Stream>> streams;
  for (int k = 0; k < 2; ++k)
    for (const auto& p : prompts) streams.push_back(e.submit(greedy(tok, p, 20)));
  for (size_t i = 0; i < streams.size(); ++i) {
    ASSERT_TRUE(streams[i]) << "request " << i << " refused";
    const Answer a = collect(*streams[i]);
    EXPECT_EQ(a.text, alone[i % prompts.size()]) << "request " << i;
    EXPECT_EQ(a.done.finish_reason, "length");
    EXPECT_EQ(a.done.completion_tokens, 20);
  }
  // The same prompt again: every prompt token from the cache, the same answer.
  const Answer again = collect(*e.submit(greedy(tok, prompts[0], 20)));
  EXPECT_EQ(again.text, alone[0]);
  EXPECT_EQ(again.done.cached_tokens, again.done.prompt_tokens);
  // A longer prompt sharing a prefix reuses it.
  const Answer longer = collect(*e.submit(greedy(tok, prompts[0] + " there", 5)));
  EXPECT_GT(longer.done.cached_tokens, 0);
  EXPECT_LT(longer.done.cached_tokens, longer.done.prompt_tokens);
  // A stop string ends the answer before it.
  CompletionRequest st = greedy(tok, prompts[0], 20);
  st.stop = {"Lily"};
  const Answer stopped = collect(*e.submit(st));
  EXPECT_EQ(stopped.done.finish_reason, "stop");
  EXPECT_EQ(stopped.text, alone[0].substr(0, alone[0].find("Lily")));
}

TEST(Engine, CancelFreesTheSlotAndTheQueueIsBounded) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const Tokenizer& tok = *model->tokenizer;
  const ContextOptions o = on_cpu(2048);
  Engine e(model, o, 1, 1);
  CompletionRequest endless = greedy(tok, "Once upon a time", -1);
  endless.sampling.temp = 1;  // no end of text expected soon; cancelled below
  auto first = e.submit(endless);
  ASSERT_TRUE(first);
  ASSERT_TRUE(first->pop(std::chrono::milliseconds(30000)));  // it is generating
  auto second = e.submit(greedy(tok, "The dog", 4));          // waits: the queue holds 1
  ASSERT_TRUE(second);
  EXPECT_FALSE(e.submit(greedy(tok, "The cat", 4)));  // the queue is full
  first->cancel();
  const Answer a = collect(*second);  // served once the cancelled request left its slot
  EXPECT_EQ(a.done.finish_reason, "length");
  EXPECT_EQ(a.done.completion_tokens, 4);
  EXPECT_EQ(e.stats().busy_slots, 0);
}

TEST(Sequence, TakenFromTheContextAndReturned) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  ContextOptions o = on_cpu(2 * 64);  // the pool: a block per sequence
  o.n_ctx_per_seq = 64;
  o.n_seq = 2;
  ModelContext ctx(model, o);
  const std::vector<int32_t> ids = model->tokenizer->encode("Once upon a time", true, true);
  std::vector<float> first;
  {
    Sequence a(ctx), b(ctx);
    EXPECT_EQ(ctx.live_sequences(), 2);
    EXPECT_NE(a.id(), b.id());
    EXPECT_THROW(Sequence c(ctx), UsageError);  // both taken
    first = a.eval(ids);
    EXPECT_EQ(a.position(), int(ids.size()));
    EXPECT_EQ(a.history(), ids);
    EXPECT_EQ(b.position(), 0);
    // A rewind keeps the first tokens; evaluating the rest again gives the same logits.
    ASSERT_TRUE(a.rewind(2));
    EXPECT_EQ(a.history(), std::vector<int32_t>(ids.begin(), ids.begin() + 2));
    const std::vector<float> again = a.eval(std::span<const int32_t>(ids).subspan(2));
    ASSERT_EQ(again.size(), first.size());
    for (size_t i = 0; i < first.size(); ++i) ASSERT_NEAR(again[i], first[i], 1e-3) << i;
    EXPECT_FALSE(a.rewind(int(ids.size()) + 1));
    // Two sequences in one pass: each history extended by its own tokens.
    const int32_t next = 42;
    const std::vector<Sequence::Run> runs = {{&a, std::span<const int32_t>(&next, 1)}, {&b, ids}};
    const auto both = Sequence::eval_batch(ctx, runs);
    ASSERT_EQ(both.size(), 2u);
    EXPECT_EQ(b.history(), ids);
    EXPECT_EQ(a.history().size(), ids.size() + 1);
    EXPECT_EQ(a.history().back(), next);
  }
  EXPECT_EQ(ctx.live_sequences(), 0);
  // A new sequence starts empty, whatever the cells held before.
  Sequence c(ctx);
  EXPECT_EQ(c.position(), 0);
  EXPECT_TRUE(c.history().empty());
  EXPECT_EQ(c.eval(ids), first);
}

TEST(Engine, EveryTokenIsAnEventAndTheIdsAreTheText) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const Tokenizer& tok = *model->tokenizer;
  Engine e(model, on_cpu(128), 1, 0);
  auto s = e.submit(greedy(tok, "Once upon a time", 16));
  ASSERT_TRUE(s);
  std::vector<int32_t> ids;
  std::string text;
  StreamEvent done;
  for (;;) {
    auto ev = s->pop(std::chrono::milliseconds(30000));
    ASSERT_TRUE(ev);
    if (ev->done) {
      done = *ev;
      break;
    }
    text += ev->text;
    if (ev->token >= 0) ids.push_back(ev->token);
  }
  EXPECT_EQ(ids.size(), 16u);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(done.finish_reason, "length");
  EXPECT_EQ(done.stop_detail, "token limit");
  EXPECT_EQ(done.decode_steps, 15);  // the last token is not evaluated
  EXPECT_GT(done.prompt_seconds, 0);
  // Bad requests are refused before they queue.
  EXPECT_THROW(e.submit(CompletionRequest{}), UsageError);
  CompletionRequest too_long = greedy(tok, "x", 1);
  too_long.prompt.assign(128, too_long.prompt[0]);
  EXPECT_THROW(e.submit(too_long), UsageError);
}

TEST(Engine, CancelEndsARequestWaitingPromptingOrGenerating) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const Tokenizer& tok = *model->tokenizer;
  ContextOptions o = on_cpu(2048);
  o.n_batch = 4;  // a long prompt takes many steps, each at least 2 ms
  setenv("POLYSTACK_TEST_STEP_DELAY_MS", "2", 1);
  Engine e(model, o, 1, 4);
  unsetenv("POLYSTACK_TEST_STEP_DELAY_MS");
  CompletionRequest endless = greedy(tok, "Once upon a time", -1);
  endless.ignore_eos = true;
  auto generating = e.submit(endless);
  ASSERT_TRUE(generating);
  ASSERT_TRUE(generating->pop(std::chrono::milliseconds(30000)));  // it is generating
  CompletionRequest long_prompt = greedy(tok, "x", 4);
  long_prompt.prompt.assign(1500, tok.encode("Lily", false, false).at(0));
  auto prompting = e.submit(long_prompt);
  auto waiting = e.submit(greedy(tok, "The dog", 4));
  ASSERT_TRUE(prompting && waiting);
  e.cancel(waiting);  // still in the queue
  auto w = collect(*waiting);
  EXPECT_EQ(w.done.finish_reason, "cancelled");
  EXPECT_EQ(w.text, "");
  e.cancel(generating);
  auto g = collect(*generating);
  EXPECT_EQ(g.done.finish_reason, "cancelled");
  // The long prompt takes the slot; cancelled before its 375 steps are through.
  for (int i = 0; i < 3000 && (e.stats().busy_slots == 0 || e.stats().queue_length > 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(e.stats().busy_slots, 1);
  e.cancel(prompting);
  auto p = collect(*prompting);
  EXPECT_EQ(p.done.finish_reason, "cancelled");
  EXPECT_EQ(p.done.completion_tokens, 0);
  EXPECT_EQ(e.stats().busy_slots, 0);
  EXPECT_EQ(e.stats().queue_length, 0);
  // The slot serves the next request as usual.
  const Answer after = collect(*e.submit(greedy(tok, "The dog", 4)));
  EXPECT_EQ(after.done.finish_reason, "length");
  EXPECT_EQ(after.done.completion_tokens, 4);
}

// With --deterministic a sequence's logits are bit for bit the same whatever shares its passes:
// alone (its prompt in one pass, then one token a pass) against its prompt cut into uneven
// chunks beside another sequence's prompt and decode tokens, on stories260K (F32 weights: the
// row dots instead of the tiles) at every ISA level this CPU has (each named on failure). The
// same comparison without the flag fails at the AVX2 and AVX-512 levels.
TEST(ModelContext, DeterministicLogitsDoNotDependOnTheBatch) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const Tokenizer& tok = *model->tokenizer;
  const std::vector<int32_t> a =
      tok.encode("Lily had a red ball. One day she went to the park with her mom", true, true);
  const std::vector<int32_t> b = tok.encode("The little dog ran and ran", true, true);
  const std::vector<int32_t> next = {263, 300, 411, 290, 305, 322};
  const std::string saved = std::getenv("POLYSTACK_ISA") ? std::getenv("POLYSTACK_ISA") : "";
  std::vector<std::string> levels;
  for (IsaLevel l : {IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::AvxVnni, IsaLevel::Avx512})
    if (isa_level_runs(l)) levels.push_back(isa_level_name(l));
  for (const std::string& level : levels)
    for (const int threads : {1, 2}) {
      setenv("POLYSTACK_ISA", level.c_str(), 1);
      ContextOptions o = on_cpu(128);
      o.n_seq = 2;
      o.n_threads = threads;
      o.deterministic = true;
      ModelContext alone_ctx(model, o), mixed_ctx(model, o);
      Sequence alone(alone_ctx);
      std::vector<std::vector<float>> want = {alone.eval(a)};
      for (int32_t t : next) want.push_back(alone.eval(std::span<const int32_t>(&t, 1)));

      Sequence seq(mixed_ctx), other(mixed_ctx);
      std::vector<std::vector<float>> got;
      const std::span<const int32_t> as(a), bs(b);
      // a's prompt in pieces of 3, 1 and the rest, beside b's prompt (whole, then in pieces).
      Sequence::eval_batch(mixed_ctx, std::vector<Sequence::Run>{{&seq, as.subspan(0, 3)},
                                                                 {&other, bs.subspan(0, 5)}});
      Sequence::eval_batch(
          mixed_ctx, std::vector<Sequence::Run>{{&other, bs.subspan(5)}, {&seq, as.subspan(3, 1)}});
      got.push_back(
          Sequence::eval_batch(mixed_ctx, std::vector<Sequence::Run>{{&seq, as.subspan(4)}}).at(0));
      int32_t other_next = 300;
      for (size_t i = 0; i < next.size(); ++i) {
        std::vector<Sequence::Run> runs = {{&other, std::span<const int32_t>(&other_next, 1)},
                                           {&seq, std::span<const int32_t>(&next[i], 1)}};
        if (i % 2) std::swap(runs[0], runs[1]);
        got.push_back(Sequence::eval_batch(mixed_ctx, runs).at(i % 2 ? 0 : 1));
      }
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_EQ(got[i], want[i]) << "step " << i << ", " << threads << " thread(s), " << level;
    }
  if (saved.empty())
    unsetenv("POLYSTACK_ISA");
  else
    setenv("POLYSTACK_ISA", saved.c_str(), 1);
  std::printf("batch invariance checked at %zu ISA level(s), up to %s\n", levels.size(),
              levels.back().c_str());
}

// An embedding request's event: the pooled final hidden states.
std::vector<float> embed(Engine& e, const std::vector<int32_t>& prompt, Pooling pooling) {
  CompletionRequest r;
  r.prompt = prompt;
  r.embed = true;
  r.pooling = pooling;
  std::shared_ptr<Stream> s = e.submit(r);
  if (!s) {
    ADD_FAILURE() << "refused";
    return {};
  }
  const Answer a = collect(*s);
  EXPECT_EQ(a.text, "");
  EXPECT_EQ(a.done.finish_reason, "stop");
  EXPECT_EQ(a.done.prompt_tokens, int(prompt.size()));
  EXPECT_EQ(a.done.completion_tokens, 0);
  return a.done.embedding;
}

// Embeddings are the final hidden states after the output norm: the output matrix times the
// last token's gives the logits the model gives for the next token; the poolings are the mean,
// first and last of the per-token states; requests side by side in one pass and prompts cut
// into chunks give the same vectors as one request at a time (llama-server -np 2 does not).
TEST(Engine, EmbeddingsArePooledFinalHiddenStates) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const Tokenizer& tok = *model->tokenizer;
  const int64_t n_embd = model->model->params().n_embd, n_vocab = model->model->params().n_vocab;
  const std::vector<std::vector<int32_t>> texts = {
      tok.encode("Lily had a red ball. One day she went to the park with her mom", true, true),
      tok.encode("The little dog ran and ran", true, true),
      tok.encode("Once upon a time there was a big tree in the garden of a small house", true,
                 true)};
  ContextOptions o = on_cpu(1024, 8);  // prompts in chunks of 8
  o.deterministic = true;
  std::vector<std::vector<float>> rows, mean, cls, last;
  {
    Engine one(model, o, 1, 8);
    for (const auto& t : texts) {
      rows.push_back(embed(one, t, Pooling::none));
      mean.push_back(embed(one, t, Pooling::mean));
      cls.push_back(embed(one, t, Pooling::cls));
      last.push_back(embed(one, t, Pooling::last));
    }
    // The slot and its cells are free again: a completion still runs.
    EXPECT_EQ(collect(*one.submit(greedy(tok, "Once upon", 3))).done.completion_tokens, 3);
  }
  const gguf::TensorInfo* out = model->file->find_tensor("output.weight");
  ASSERT_TRUE(out && out->type == DType::F32);
  const float* w = reinterpret_cast<const float*>(out->data);
  for (size_t i = 0; i < texts.size(); ++i) {
    const size_t n = texts[i].size();
    ASSERT_EQ(rows[i].size(), n * size_t(n_embd));
    ASSERT_EQ(mean[i].size(), size_t(n_embd));
    for (int64_t j = 0; j < n_embd; ++j) {
      double sum = 0;
      for (size_t t = 0; t < n; ++t) sum += rows[i][t * size_t(n_embd) + size_t(j)];
      EXPECT_NEAR(mean[i][size_t(j)], sum / double(n), 1e-5) << i << " " << j;
      EXPECT_EQ(cls[i][size_t(j)], rows[i][size_t(j)]);
      EXPECT_EQ(last[i][size_t(j)], rows[i][(n - 1) * size_t(n_embd) + size_t(j)]);
    }
    // output.weight x the last state = the logits of the next token.
    ModelContext ctx(model, on_cpu(1024));
    const std::vector<float> logits = ctx.eval(texts[i]);
    float worst = 0;
    for (int64_t v = 0; v < n_vocab; ++v) {
      double dot = 0;
      for (int64_t j = 0; j < n_embd; ++j) dot += double(w[v * n_embd + j]) * last[i][size_t(j)];
      worst = std::max(worst, float(std::abs(dot - logits[size_t(v)])));
    }
    EXPECT_LT(worst, 2e-3) << "text " << i;
  }
  // Side by side: two slots, all three at once with a completion among them.
  Engine two(model, o, 2, 8);
  std::vector<std::shared_ptr<Stream>> streams;
  for (const auto& t : texts) {
    CompletionRequest r;
    r.prompt = t;
    r.embed = true;
    streams.push_back(two.submit(r));
  }
  std::shared_ptr<Stream> text = two.submit(greedy(tok, "The little dog", 6));
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(collect(*streams[i]).done.embedding, mean[i]) << "text " << i << " side by side";
  EXPECT_EQ(collect(*text).done.completion_tokens, 6);
}

// The engine's cells come from one pool: a follow-up that repeats a finished conversation
// evaluates only its new tokens, whichever slot takes it; a request whose prompt finds too few
// free cells waits for them; a sequence that cannot grow stops with "length"; and when every
// request is done no cells are held by running sequences, only by cached ones.
TEST(Engine, OnePoolOfCellsForEverySlot) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const Tokenizer& tok = *model->tokenizer;
  {
    Engine e(model, on_cpu(1024), 2, 4);
    const CompletionRequest first = greedy(tok, "Once upon a time", 12);
    StreamEvent done;
    std::vector<int32_t> ids;
    auto s = e.submit(first);
    for (;;) {
      auto ev = s->pop(std::chrono::milliseconds(30000));
      ASSERT_TRUE(ev);
      if (ev->token >= 0) ids.push_back(ev->token);
      if (ev->done) break;
    }
    ASSERT_EQ(ids.size(), 12u);
    // Slot 0 busy with another request (held by the step delay), the follow-up goes to the
    // other slot and still finds the conversation's cells.
    CompletionRequest other = greedy(tok, "The little dog", -1);
    other.ignore_eos = true;
    auto busy = e.submit(other);
    ASSERT_TRUE(busy->pop(std::chrono::milliseconds(30000)));
    CompletionRequest follow = greedy(tok, "", 4);
    follow.prompt = first.prompt;
    follow.prompt.insert(follow.prompt.end(), ids.begin(), ids.end());
    const std::vector<int32_t> more = tok.encode(" Lily", false, false);
    follow.prompt.insert(follow.prompt.end(), more.begin(), more.end());
    const Answer f = collect(*e.submit(follow));
    // Everything but the last generated token (never evaluated) came from the cache.
    EXPECT_EQ(f.done.cached_tokens, int(first.prompt.size() + ids.size() - 1));
    EXPECT_EQ(e.stats().cached_tokens, uint64_t(f.done.cached_tokens));
    e.cancel(busy);
    collect(*busy);
    const EngineStats st = e.stats();
    EXPECT_EQ(st.kv_cells, 1024);
    EXPECT_EQ(st.kv_cells_running, 0);
    EXPECT_GT(st.kv_cells_cached, 0);
    EXPECT_EQ(st.busy_slots, 0);
  }
  {
    // 128 cells: two blocks. A 100-token prompt takes both; a second waits until the first
    // is done, then runs; a request that outgrows the pool stops with "length".
    Engine e(model, on_cpu(128), 2, 4);
    CompletionRequest big = greedy(tok, "x", 20);
    big.prompt.assign(100, tok.encode("Lily", false, false).at(0));
    CompletionRequest big2 = big;
    big2.prompt[50] = tok.encode("ball", false, false).at(0);  // not the same prompt
    auto a = e.submit(big);
    auto b = e.submit(big2);
    const Answer ra = collect(*a), rb = collect(*b);
    EXPECT_EQ(ra.done.finish_reason, "length");
    EXPECT_EQ(ra.done.completion_tokens, 20);
    EXPECT_EQ(rb.done.finish_reason, "length");
    EXPECT_EQ(rb.done.completion_tokens, 20);
    EXPECT_EQ(rb.done.cached_tokens, 50);  // a's cells, reused up to where the prompts differ
    CompletionRequest grow = greedy(tok, "Once upon a time", -1);
    grow.ignore_eos = true;
    ContextOptions o = on_cpu(128);
    const Answer g = collect(*e.submit(grow));
    EXPECT_EQ(g.done.finish_reason, "length");
    EXPECT_EQ(g.done.stop_detail, "context full");  // 128 positions: the sequence's limit
  }
  {
    // Two sequences of up to 128 positions over 128 cells: the second outgrows what is left.
    ContextOptions o = on_cpu(128);
    o.n_ctx_per_seq = 128;
    setenv("POLYSTACK_TEST_STEP_DELAY_MS", "1", 1);
    Engine e(model, o, 2, 4);
    unsetenv("POLYSTACK_TEST_STEP_DELAY_MS");
    CompletionRequest grow = greedy(tok, "Once upon a time", 100);
    grow.ignore_eos = true;
    CompletionRequest grow2 = greedy(tok, "The little dog", 100);
    grow2.ignore_eos = true;
    auto a = e.submit(grow);
    auto b = e.submit(grow2);
    const Answer ra = collect(*a), rb = collect(*b);
    // Both started with a block each; the first to need a second block takes the last one,
    // the other stops when it needs one.
    const int full = (ra.done.stop_detail.find("KV pool full") == 0) +
                     (rb.done.stop_detail.find("KV pool full") == 0);
    EXPECT_EQ(full, 1) << ra.done.stop_detail << " / " << rb.done.stop_detail;
    EXPECT_EQ(ra.done.finish_reason, "length");
    EXPECT_EQ(rb.done.finish_reason, "length");
    EXPECT_EQ(e.stats().kv_cells_running, 0);
  }
}

// Many requests of random lengths over a small pool, some cancelled at random moments (waiting,
// prompting or generating), some too long to finish: every stream ends with exactly one final
// event, tokens and text agree, and once all are done no cell is held by a running sequence.
TEST(Engine, RandomRequestsAndCancelsOverASmallPool) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "stories260K.gguf not found in ../shared";
  const Tokenizer& tok = *model->tokenizer;
  ContextOptions o = on_cpu(320, 16);  // 5 blocks, prompts in chunks of 16
  o.n_ctx_per_seq = 200;
  Engine e(model, o, 3, 64);
  std::mt19937 rng(5);
  const std::vector<int32_t> base =
      tok.encode("Once upon a time there was a little dog", true, true);
  std::vector<std::shared_ptr<Stream>> streams;
  std::vector<bool> cancel_it;
  for (int i = 0; i < 40; ++i) {
    CompletionRequest r;
    // Prompts that share a start in some cases, and differ in others.
    r.prompt.assign(base.begin(), base.begin() + 1 + ptrdiff_t(rng() % base.size()));
    for (int k = int(rng() % 120); k > 0; --k) r.prompt.push_back(int32_t(3 + rng() % 400));
    r.sampling.temp = (rng() % 2) ? 0.0f : 0.8f;
    r.sampling.seed = rng();
    r.max_tokens = int(rng() % 80);
    r.ignore_eos = rng() % 2;
    auto s = e.submit(r);
    ASSERT_TRUE(s) << "request " << i;
    streams.push_back(s);
    cancel_it.push_back(rng() % 4 == 0);
    if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    if (i >= 5 && cancel_it[size_t(i - 5)]) e.cancel(streams[size_t(i - 5)]);
  }
  for (size_t i = streams.size() - 5; i < streams.size(); ++i)
    if (cancel_it[i]) e.cancel(streams[i]);
  int finished = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    std::string text;
    std::vector<int32_t> ids;
    int finals = 0;
    StreamEvent last;
    for (;;) {
      auto ev = streams[i]->pop(std::chrono::milliseconds(finals ? 50 : 60000));
      if (!ev) break;  // after the final event: nothing more may come
      if (ev->done) {
        ++finals;
        last = *ev;
        continue;
      }
      ASSERT_EQ(finals, 0) << "request " << i << ": an event after the final one";
      text += ev->text;
      if (ev->token >= 0) ids.push_back(ev->token);
    }
    ASSERT_EQ(finals, 1) << "request " << i;
    EXPECT_TRUE(last.finish_reason == "stop" || last.finish_reason == "length" ||
                last.finish_reason == "cancelled")
        << "request " << i << ": " << last.finish_reason << " " << last.error;
    EXPECT_EQ(last.completion_tokens, int(ids.size())) << "request " << i;
    // The text is the tokens' pieces (all of them once the request ended by itself).
    std::string pieces;
    for (int32_t id : ids) pieces += tok.token_to_piece(id, false);
    if (last.finish_reason != "cancelled") {
      EXPECT_EQ(pieces, text) << "request " << i;
    }
    finished += last.finish_reason != "cancelled";
  }
  EXPECT_GT(finished, 0);
  const EngineStats st = e.stats();
  EXPECT_EQ(st.busy_slots, 0);
  EXPECT_EQ(st.queue_length, 0);
  EXPECT_EQ(st.kv_cells_running, 0);
  EXPECT_LE(st.kv_cells_cached, st.kv_cells);
}

}  // namespace
}  // namespace ps
