// libFuzzer target for the server's request bodies (server/request.h): the input is the body
// of a request to /v1/completions, /v1/chat/completions (each built-in chat template), /tokenize or
// /detokenize, chosen by its first byte, read with a real tokenizer (stories260K's from
// ../shared when present, else a small one built here). An ApiError is the normal outcome of a
// bad body; any other exception, a crash, a sanitizer report or a hang is a finding.
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
#include "gguf/gguf.h"
#include "gguf_builder.h"
#include "server/request.h"
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const ps::Tokenizer& tok = *vocab().tok;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const uint8_t route = data[0] % 8;
  try {
    if (route < 5) {
      const bool chat = route >= 2;
      ps::server::parse_completion(body, chat, tok, chat_setups()[chat ? route - 2 : 0],
                                   /*n_ctx=*/256);
    } else if (route < 7) {
      ps::server::parse_tokenize(body, tok);
    } else {
      tok.decode(ps::server::parse_detokenize(body, tok));
    }
  } catch (const ps::server::ApiError&) {
  }
  return 0;
}
