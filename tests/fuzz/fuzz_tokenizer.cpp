// libFuzzer target for the tokenizers: encode and decode over fuzzed text, with fuzzed
// vocabularies and with the real ones of ../shared/tokenizer-tests (loaded once; skipped when
// absent). A ps::Error (a vocabulary the loader refuses, an id outside the vocabulary) is a
// normal outcome; a crash, a sanitizer report or a hang is a finding.
//
// Input: byte 0 picks the vocabulary (below 0xc0: a real one, if any was found; else a fuzzed
// one) and the encode flags. A real vocabulary takes the rest as text. A fuzzed one reads a
// header (tokenizer model, pre-tokenizer, flags, special ids), then vocabulary lines up to the
// first NUL byte, then the text. A vocabulary line is "=left right" (a BPE merge) or a type
// byte followed by the token's text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf_builder.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;

struct Vocabulary {
  std::vector<uint8_t> bytes;
  std::unique_ptr<ps::gguf::File> file;
  std::unique_ptr<ps::Tokenizer> tokenizer;
};

std::vector<std::unique_ptr<Vocabulary>> load_real_vocabularies() {
  std::vector<std::unique_ptr<Vocabulary>> out;
  const char* env = std::getenv("POLYSTACK_SHARED_DIR");
  const fs::path dir = fs::path(env ? env : POLYSTACK_SHARED_DIR) / "tokenizer-tests";
  for (const char* name :
       {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-bert-bge.gguf"}) {
    std::ifstream in(dir / name, std::ios::binary);
    if (!in) continue;
    auto v = std::make_unique<Vocabulary>();
    v->bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    v->file = ps::gguf::File::parse(name, v->bytes.data(), v->bytes.size());
    v->tokenizer = ps::Tokenizer::from_gguf(*v->file);
    out.push_back(std::move(v));
  }
  return out;
}

const std::vector<std::unique_ptr<Vocabulary>>& real_vocabularies() {
  static const auto v = load_real_vocabularies();
  return v;
}

// Encodes, decodes what came out, and decodes ids taken from the text's bytes (some outside
// the vocabulary). Encoding may refuse a text the vocabulary cannot spell at all (no byte or
// unknown token to stand in) with a ps::Error; it never gives an id outside the vocabulary.
void exercise(const ps::Tokenizer& tok, std::string_view text, uint8_t flags) {
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, flags & 1, flags & 2);
  } catch (const ps::Error&) {
  }
  for (const int32_t id : ids)
    if (id < 0 || id >= tok.n_vocab()) __builtin_trap();
  (void)tok.decode(ids, flags & 4);
  std::vector<int32_t> fuzzed;
  for (size_t i = 0; i + 2 <= text.size() && fuzzed.size() < 64; i += 2) {
    const int32_t w = int32_t(uint8_t(text[i])) << 8 | uint8_t(text[i + 1]);
    fuzzed.push_back(w % (tok.n_vocab() + 2) - 1);
  }
  for (const int32_t id : fuzzed) {
    try {
      (void)tok.token_to_piece(id, flags & 8);
    } catch (const ps::Error&) {
    }
  }
  try {
    (void)tok.decode(fuzzed, flags & 8);
  } catch (const ps::Error&) {
  }
}

struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t byte() {
    if (!n) return 0;
    --n;
    return *p++;
  }
};

void fuzzed_vocabulary(Reader r) {
  static const std::vector<std::string> pre_names = [] {
    std::vector<std::string> v = ps::pre_tokenizer_names();
    v.push_back("not-a-pre-tokenizer");
    return v;
  }();
  static const char* const models[] = {"llama", "gpt2", "bert"};
  const uint8_t model = r.byte() % 3, pre = r.byte(), flags = r.byte();
  const uint8_t bos = r.byte(), eos = r.byte(), unk = r.byte();

  std::string_view rest(reinterpret_cast<const char*>(r.p), r.n);
  const size_t nul = rest.find('\0');
  const std::string_view vocab = rest.substr(0, nul);
  const std::string_view text = nul == rest.npos ? std::string_view() : rest.substr(nul + 1);

  std::vector<std::string> tokens, merges;
  std::vector<float> scores;
  std::vector<int32_t> types;
  size_t at = 0;
  while (at < vocab.size()) {
    size_t end = vocab.find('\n', at);
    if (end == vocab.npos) end = vocab.size();
    const std::string_view line = vocab.substr(at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    if (line[0] == '=') {
      merges.emplace_back(line.substr(1));
      continue;
    }
    // Mostly normal tokens; the other types (control, user-defined, byte, ...) and some
    // out-of-range ones from the type byte.
    const uint8_t t = uint8_t(line[0]);
    types.push_back(t < 0x80 ? 1 : t % 9);
    tokens.emplace_back(line.substr(1));
    scores.push_back(-float(tokens.size()) + float(t & 7) * 0.25f);
  }

  ps::test::GgufBuilder b;
  b.kv_str("general.architecture", "llama");
  b.kv_str("tokenizer.ggml.model", models[model]);
  if (flags & 0x80) b.kv_str("tokenizer.ggml.pre", pre_names[pre % pre_names.size()]);
  b.kv_str_array("tokenizer.ggml.tokens", tokens);
  if (!(flags & 0x40)) b.kv_array("tokenizer.ggml.scores", 6, scores);
  if (!(flags & 0x20)) b.kv_array("tokenizer.ggml.token_type", 5, types);
  if (model == 1 || (flags & 0x10)) b.kv_str_array("tokenizer.ggml.merges", merges);
  if (bos != 0xff) b.kv_u32("tokenizer.ggml.bos_token_id", bos);
  if (eos != 0xff) b.kv_u32("tokenizer.ggml.eos_token_id", eos);
  if (unk != 0xff) b.kv_u32("tokenizer.ggml.unknown_token_id", unk);
  if (flags & 0x08) b.kv_bool("tokenizer.ggml.add_bos_token", flags & 1);
  if (flags & 0x04) b.kv_bool("tokenizer.ggml.add_space_prefix", flags & 2);
  if (model == 2 && (flags & 0x02)) b.kv_bool("tokenizer.ggml.normalizer.lowercase", flags & 1);
  const std::vector<uint8_t> image = b.build();

  std::unique_ptr<ps::gguf::File> file;
  std::unique_ptr<ps::Tokenizer> tok;
  try {
    file = ps::gguf::File::parse("fuzz-vocab.gguf", image.data(), image.size());
    tok = ps::Tokenizer::from_gguf(*file);
  } catch (const ps::Error&) {
    return;
  }
  (void)tok->bos(), (void)tok->eos(), (void)tok->adds_bos();
  for (const int32_t id : tok->eog_ids())
    if (id < 0 || id >= tok->n_vocab()) __builtin_trap();
  exercise(*tok, text, flags);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)real_vocabularies();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const auto& real = real_vocabularies();
  if (mode < 0xc0 && !real.empty()) {
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    exercise(*real[mode % real.size()]->tokenizer, text, mode >> 4);
    return 0;
  }
  fuzzed_vocabulary(Reader{data + 1, size - 1});
  return 0;
}
