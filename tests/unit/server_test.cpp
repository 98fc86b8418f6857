// The server's text handling without HTTP: chat formats from template markers, and the request
// bodies read without HTTP (server/request.h), each malformed field a 400 naming it and random
// damage to a valid body never giving anything but an ApiError. The engine's own tests are in
// engine_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "engine/model_context.h"
#include "server/chat_template.h"
#include "server/request.h"
#include "stories_model.h"
#include "tokenizer/tokenizer.h"

namespace ps::server {
namespace {

using test::stories;

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
