// The server's text handling without HTTP: chat formats from template markers, text deltas
// that never split a UTF-8 character or leak part of a stop string, and the engine's slots on
// a real model (stories260K): several requests at once, each its own answer, a repeated
// prompt from the cache, a cancelled stream freeing its slot, a full queue.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "server/chat_template.h"
#include "server/engine.h"
#include "tokenizer/tokenizer.h"

namespace ps::server {
namespace {

TEST(ChatTemplate, FormatsFromMarkers) {
  EXPECT_EQ(detect_chat_format("{{ '<start_of_turn>' + role }}", "llama"), ChatFormat::Gemma);
  EXPECT_EQ(detect_chat_format("<|start_header_id|>{{ m.role }}", "llama"), ChatFormat::Llama3);
  EXPECT_EQ(detect_chat_format("<|im_start|>", "qwen2"), ChatFormat::ChatML);
  EXPECT_EQ(detect_chat_format("", "gemma3"), ChatFormat::Gemma);
  EXPECT_EQ(detect_chat_format("", "llama"), ChatFormat::ChatML);
  const std::vector<ChatMessage> m = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Why?"}};
  EXPECT_EQ(format_chat(ChatFormat::Gemma, m),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello."
            "<end_of_turn>\n<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(format_chat(ChatFormat::Llama3, {{"user", "Hi"}}),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(format_chat(ChatFormat::ChatML, {{"system", "S"}, {"user", "Hi"}}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_THROW(format_chat(ChatFormat::ChatML, {{"tool", "x"}}), UsageError);
  EXPECT_EQ(chat_turn_end(ChatFormat::Gemma), "<end_of_turn>");
}

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

std::shared_ptr<LoadedModel> stories() {
  const char* dir = std::getenv("POLYSTACK_SHARED_DIR");
  const std::string path =
      std::string(dir ? dir : POLYSTACK_SHARED_DIR) + "/models/stories260K.gguf";
  if (!std::filesystem::exists(path)) return nullptr;
  return LoadedModel::load(path);
}

SessionOptions on_cpu(int n_ctx) {
  SessionOptions o;
  o.device = "cpu";
  o.n_ctx = n_ctx;
  o.n_threads = 1;
  return o;
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
  const SessionOptions o = on_cpu(128);
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
  const SessionOptions o = on_cpu(2048);
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

}  // namespace
}  // namespace ps::server
