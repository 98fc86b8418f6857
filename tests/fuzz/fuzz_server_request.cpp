// libFuzzer target for the server's requests. A first byte below 0xF0 picks a body route
// (server/request.h): the input is the body of a request to /v1/completions,
// /v1/chat/completions (each built-in chat template), /tokenize, /v1/embeddings or /detokenize,
// read with a real tokenizer (stories260K's from ../shared when present, else a small one built
// here); an ApiError is the normal outcome of a bad body. From 0xF0 up the input is raw bytes off a
// connection for the transport's request parser (server/transport.h), fed in pieces whose size
// the second byte sets, request after request as pipelining gives them; a status is the normal
// outcome of a bad request. From 0xE0 to 0xEF the rest is a model's reply read for tool calls in
// the syntax the byte picks (engine/tool_calls.h); a reply whose calls do not parse must come back
// whole, and read as a stream in two pieces it must read as it does whole (engine/reply_reader.h).
// A chat body's first byte over 8 picks the tool call syntax its template is taken to teach. Any
// other exception, a crash, a sanitizer report, a hang or a broken invariant (bytes used beyond
// those given, a body over the limit) is a finding.
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model_context.h"
#include "engine/reply_reader.h"
#include "engine/tool_calls.h"
#include "gguf/gguf.h"
#include "gguf_builder.h"
#include "server/request.h"
#include "server/transport.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Vocab {
  std::vector<uint8_t> bytes;  // the built vocabulary, when stories260K is absent
  std::unique_ptr<ps::gguf::File> file;
  std::shared_ptr<ps::LoadedModel> model;
  const ps::Tokenizer* tok = nullptr;
};

const Vocab& vocab() {
  static const Vocab v = [] {
    Vocab v;
    const char* env = std::getenv("POLYSTACK_SHARED_DIR");
    const std::string path =
        std::string(env ? env : POLYSTACK_SHARED_DIR) + "/models/stories260K.gguf";
    if (std::filesystem::exists(path)) {
      v.model = ps::LoadedModel::load(path);
      v.tok = v.model->tokenizer.get();
      return v;
    }
    ps::test::GgufBuilder b;
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    for (int c = 0; c < 256; ++c) tokens.push_back(fmt::format("<0x{:02X}>", c));
    for (const char* t : {"\xe2\x96\x81", "a", "b", "ab",
                          "\xe2\x96\x81"
                          "a"})
      tokens.push_back(t);
    b.kv_str("tokenizer.ggml.model", "llama");
    b.kv_str_array("tokenizer.ggml.tokens", tokens);
    v.bytes = b.build();
    v.file = ps::gguf::File::parse("vocab.gguf", v.bytes.data(), v.bytes.size());
    static const auto tok = ps::Tokenizer::from_gguf(*v.file);
    v.tok = tok.get();
    return v;
  }();
  return v;
}

// The built-in templates a chat body is rendered with.
const ps::server::ChatSetup* chat_setups() {
  static const std::vector<std::unique_ptr<ps::jinja::ChatTemplate>> templates = [] {
    std::vector<std::unique_ptr<ps::jinja::ChatTemplate>> t;
    for (const char* name : {"chatml", "gemma", "llama3"})
      t.push_back(std::make_unique<ps::jinja::ChatTemplate>(
          ps::jinja::choose_chat_template(name, "", "llama"), "<s>", "</s>", true));
    return t;
  }();
  static const ps::server::ChatSetup setups[] = {
      {templates[0].get(), std::nullopt}, {templates[1].get(), true}, {templates[2].get(), false}};
  return setups;
}

// Raw bytes into the transport's parser, `step` bytes at a time.
void parse_connection(std::string_view bytes, size_t step) {
  ps::server::TransportLimits limits;
  limits.max_body_bytes = 1024;  // small enough for inputs to cross it
  auto parser = std::make_unique<ps::server::RequestParser>(limits);
  std::string pending;
  size_t at = 0;
  for (int rounds = 0; rounds < 100000; ++rounds) {
    ps::server::RequestParser::State st;
    const size_t used = parser->feed(pending, st);
    if (used > pending.size()) std::abort();
    pending.erase(0, used);
    using State = ps::server::RequestParser::State;
    if (st == State::error) {
      const ps::server::HeaderVerdict& e = parser->error();
      if (e.status < 400 || e.status > 599 || e.message.empty()) std::abort();
      (void)ps::server::error_json(e.status, e.type, e.message);
      return;
    }
    if (st == State::head) {
      const ps::server::HttpRequest& r = parser->request();
      if (r.path.empty() || (r.path[0] != '/' && r.path != "*")) std::abort();
      (void)r.header("Host");
      (void)parser->expects_continue();
      continue;
    }
    if (st == State::complete) {
      if (parser->request().body.size() > limits.max_body_bytes) std::abort();
      parser = std::make_unique<ps::server::RequestParser>(limits);
      continue;
    }
    if (at >= bytes.size()) return;
    pending.append(bytes.substr(at, step));
    at += step;
  }
  std::abort();  // the parser neither used bytes nor asked for more
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] >= 0xE0 && data[0] < 0xF0) {  // a reply's tool calls, in one of the syntaxes
    const auto format = static_cast<ps::ToolFormat>((data[0] - 0xE0) % 9);
    const std::string_view reply(reinterpret_cast<const char*>(data) + 1, size - 1);
    const ps::ToolReply r = ps::parse_tool_calls(format, reply);
    if (!r.parsed && (r.content != reply || !r.calls.empty())) std::abort();
    for (const ps::ToolCall& c : r.calls)
      if (c.name.empty() || c.arguments.empty() || c.arguments[0] != '{') std::abort();
    // Read as a stream, cut where the reply's length says: the same content and calls.
    const ps::ReplyReader::Options o{true, false, true, format};
    ps::ReplyReader whole(o), cut(o);
    const ps::ReplyReader::Parts w = whole.feed(std::string(reply), true);
    const size_t at = reply.empty() ? 0 : reply.size() * 7 / 13;
    ps::ReplyReader::Parts a = cut.feed(std::string(reply.substr(0, at)), false);
    const ps::ReplyReader::Parts b = cut.feed(std::string(reply.substr(at)), true);
    if (a.reasoning + b.reasoning != w.reasoning || a.content + b.content != w.content ||
        b.calls.size() != w.calls.size() || !a.calls.empty())
      std::abort();
    return 0;
  }
  if (data[0] >= 0xF0) {
    if (size < 2) return 0;
    parse_connection(std::string_view(reinterpret_cast<const char*>(data) + 2, size - 2),
                     1 + data[1] % 64);
    return 0;
  }
  const ps::Tokenizer& tok = *vocab().tok;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const uint8_t route = data[0] % 8;
  try {
    if (route < 5) {
      const bool chat = route >= 2;
      ps::server::ChatSetup setup = chat_setups()[chat ? route - 2 : 0];
      setup.tool_format = static_cast<ps::ToolFormat>((data[0] / 8) % 9);
      ps::server::parse_completion(body, chat, tok, setup, /*n_ctx=*/4096);
    } else if (route < 6) {
      ps::server::parse_tokenize(body, tok);
    } else if (route < 7) {
      const ps::server::EmbeddingBody e = ps::server::parse_embeddings(body, tok, 256, 64);
      for (const std::vector<int32_t>& in : e.inputs)
        if (in.empty() || in.size() >= 256) std::abort();
    } else {
      tok.decode(ps::server::parse_detokenize(body, tok));
    }
  } catch (const ps::server::ApiError&) {
  }
  return 0;
}
