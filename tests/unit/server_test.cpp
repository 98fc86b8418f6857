// The server's text handling without HTTP: chat formats from template markers, text deltas
// that never split a UTF-8 character or leak part of a stop string, and the engine's slots on
// a real model (stories260K): several requests at once, each its own answer, a repeated
// prompt from the cache, a cancelled stream freeing its slot, a full queue; and the request
// bodies read without HTTP (server/request.h), each malformed field a 400 naming it and random
// damage to a valid body never giving anything but an ApiError.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "server/chat_template.h"
#include "server/engine.h"
#include "server/request.h"
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

// The status, type and message of the error a body gives ("" when it parses).
std::string error_of(const Tokenizer& tok, std::string_view body, bool chat = false) {
  try {
    parse_completion(body, chat, tok, ChatFormat::ChatML, 64);
  } catch (const ApiError& e) {
    return fmt::format("{} {}: {}", e.status, e.type, e.what());
  }
  return "";
}

TEST(ServerRequest, FieldsAreCheckedAndNamed) {
  auto m = stories();
  if (!m) GTEST_SKIP() << "stories260K not found in ../shared/models";
  const Tokenizer& tok = *m->tokenizer;
  EXPECT_EQ(error_of(tok, "{"), "400 invalid_request_error: the request body is not valid JSON");
  EXPECT_EQ(error_of(tok, "[1]"),
            "400 invalid_request_error: the request body must be a JSON object");
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "n": 2})"),
            "400 invalid_request_error: 'n' must be 1: one choice per request");
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "temperature": "hot"})"),
            "400 invalid_request_error: 'temperature' must be a number");
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "top_p": 1.5})"),
            "400 invalid_request_error: 'top_p' must be in [0, 1]");
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "max_tokens": 0})"),
            "400 invalid_request_error: 'max_tokens' must be in [1, 1000000000]");
  EXPECT_EQ(error_of(tok, R"({"prompt": [1, 999999]})"),
            "400 invalid_request_error: token id 999999 is outside the vocabulary");
  EXPECT_EQ(error_of(tok, R"({"prompt": "a", "stream_options": 3})"),
            "400 invalid_request_error: 'stream_options' must be an object");
  EXPECT_EQ(error_of(tok, R"({"messages": [{"role": "wizard", "content": "hi"}]})", true),
            "400 invalid_request_error: messages[0]: unknown role 'wizard' (system, user or "
            "assistant)");
  const std::string long_prompt = fmt::format(R"({{"prompt": "{}"}})", std::string(200, 'a'));
  EXPECT_EQ(error_of(tok, long_prompt).substr(0, 30), "400 exceed_context_size_error:");
}

TEST(ServerRequest, ValidBodiesGiveTheEngineRequest) {
  auto m = stories();
  if (!m) GTEST_SKIP() << "stories260K not found in ../shared/models";
  const Tokenizer& tok = *m->tokenizer;
  const CompletionBody c = parse_completion(
      R"({"prompt": "Once upon", "max_tokens": 5, "stop": ["x", "y"], "stream": true,
          "stream_options": {"include_usage": true}, "seed": 3, "temperature": 0})",
      false, tok, ChatFormat::ChatML, 64);
  EXPECT_EQ(c.request.prompt, tok.encode("Once upon", true, true));
  EXPECT_EQ(c.request.max_tokens, 5);
  EXPECT_EQ(c.request.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(c.stream && c.include_usage);
  const CompletionBody chat = parse_completion(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})", true, tok,
      ChatFormat::ChatML, 64);
  EXPECT_EQ(chat.request.prompt,
            tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", true, true));
  EXPECT_EQ(chat.request.stop.back(), "<|im_end|>");
  EXPECT_EQ(parse_detokenize(R"({"tokens": [1, 2]})", tok), (std::vector<int32_t>{1, 2}));
  EXPECT_THROW(parse_detokenize(R"({"tokens": [-1]})", tok), ApiError);
  EXPECT_THROW(parse_tokenize(R"({"content": 1})", tok), ApiError);
}

TEST(ServerRequest, DamagedBodiesOnlyEverGiveApiErrors) {
  auto m = stories();
  if (!m) GTEST_SKIP() << "stories260K not found in ../shared/models";
  const Tokenizer& tok = *m->tokenizer;
  const std::string valid =
      R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "top_k": 3,
          "stop": "x", "stream": false, "prompt": [1, 2, 3], "n": 1})";
  std::mt19937 rng(11);
  const std::string alphabet = "{}[]\":,0123456789-.eE tfnulrs\\\xff\x80";
  int parsed = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string s = valid;
    for (int k = int(rng() % 4); k >= 0; --k) {
      const size_t at = rng() % s.size();
      if (rng() % 2)
        s[at] = alphabet[rng() % alphabet.size()];
      else
        s.erase(at, 1 + rng() % 4);
      if (s.empty()) s.push_back('{');
    }
    for (bool chat : {false, true}) {
      try {
        parse_completion(s, chat, tok, ChatFormat::Gemma, 64);
        ++parsed;
      } catch (const ApiError&) {
      }
    }
  }
  EXPECT_GT(parsed, 0);  // some damage leaves a valid body, so both paths ran
}

}  // namespace
}  // namespace ps::server
