#include "tokenizer/bpe_tokenizer.h"

#include <fmt/format.h>

#include <cstring>
#include <queue>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/unicode_text.h"

namespace ps {
namespace {

constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";
constexpr std::string_view kPreKey = "tokenizer.ggml.pre";

void make_merge_key(std::string& key, std::string_view left, std::string_view right) {
  const auto n = uint32_t(left.size());
  key.resize(4);
  std::memcpy(key.data(), &n, 4);
  key.append(left);
  key.append(right);
}

struct Symbol {
  int prev;
  int next;
  const char* text;
  size_t n;
};

struct Bigram {
  int left;
  int right;
  std::string text;
  int rank;
};

// Lowest rank first; on a tie, the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) {
    if (!s.empty()) s += ", ";
    s += n;
  }
  return s;
}

}  // namespace

BpeTokenizer::BpeTokenizer(const gguf::File& file) {
  model_ = "gpt2";
  const gguf::Value* pre = file.find(kPreKey);
  if (pre && pre->type != gguf::ValueType::STRING)
    throw ModelError(fmt::format("{}: metadata '{}': expected a string, found {}", file.path(),
                                 kPreKey, gguf::value_type_name(pre->type)));
  pre_ = pre ? std::string(pre->str) : std::string();
  config_ = find_pre_tokenizer(pre_);
  if (!config_)
    throw ModelError(
        fmt::format("{}: metadata '{}': pre-tokenizer '{}' is not supported (supported: {})",
                    file.path(), kPreKey, pre_, join_names(pre_tokenizer_names())));

  const gguf::Value* merges = file.find(kMergesKey);
  if (!merges)
    throw ModelError(fmt::format("{}: metadata '{}' is missing (a gpt2 tokenizer needs its merges)",
                                 file.path(), kMergesKey));
  if (merges->type != gguf::ValueType::ARRAY || merges->arr->elem_type != gguf::ValueType::STRING)
    throw ModelError(
        fmt::format("{}: metadata '{}': expected an array of strings", file.path(), kMergesKey));
  const gguf::Array& m = *merges->arr;
  merge_ranks_.reserve(size_t(m.count));
  std::string key;
  for (uint64_t i = 0; i < m.count; ++i) {
    const std::string_view merge = m.string_at(i);
    // "left right", split at the first space after the first byte (a merge may start with
    // a space in vocabularies that are not byte-level mapped).
    const size_t space = merge.size() > 1 ? merge.find(' ', 1) : std::string_view::npos;
    std::string_view left, right;
    if (space != std::string_view::npos) {
      left = merge.substr(0, space);
      right = merge.substr(space + 1);
    }
    make_merge_key(key, left, right);
    merge_ranks_.try_emplace(key, int(i));
  }

  VocabDefaults d;
  d.bos = config_->no_bos ? -1 : 11;
  d.eos = 11;
  d.add_bos = config_->add_bos;
  d.add_sep = config_->add_sep;
  d.clean_spaces = config_->clean_spaces;
  load_vocab(file, d);

  pre_tokenizer_ = std::make_unique<PreTokenizer>(config_->regexes);
}

BpeTokenizer::~BpeTokenizer() = default;

int BpeTokenizer::merge_rank(std::string_view left, std::string_view right) const {
  thread_local std::string key;
  make_merge_key(key, left, right);
  const auto it = merge_ranks_.find(std::string_view(key));
  return it == merge_ranks_.end() ? -1 : it->second;
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;

  auto add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string_view l(symbols[size_t(left)].text, symbols[size_t(left)].n);
    const std::string_view r(symbols[size_t(right)].text, symbols[size_t(right)].n);
    const int rank = merge_rank(l, r);
    if (rank < 0) return;
    std::string joined;
    joined.reserve(l.size() + r.size());
    joined.append(l).append(r);
    queue.push({left, right, std::move(joined), rank});
  };

  for (const std::string& raw_word : pre_tokenizer_->split(text)) {
    std::string word;
    word.reserve(raw_word.size() * 2);
    for (char c : raw_word) word += unicode::byte_to_unicode(uint8_t(c));

    symbols.clear();
    queue = {};
    size_t offset = 0;
    if (config_->ignore_merges && find_token(word) >= 0) {
      symbols.push_back({-1, -1, word.data(), word.size()});
      offset = word.size();
    }
    int index = 0;
    while (offset < word.size()) {
      Symbol sym;
      sym.text = word.data() + offset;
      sym.n = std::min(unicode::utf8_sequence_length(word[offset]), word.size() - offset);
      offset += sym.n;
      sym.prev = index - 1;
      sym.next = offset == word.size() ? -1 : index + 1;
      ++index;
      symbols.push_back(sym);
    }
    for (int i = 1; i < int(symbols.size()); ++i) add_bigram(i - 1, i);

    while (!queue.empty()) {
      const Bigram bigram = queue.top();
      queue.pop();
      Symbol& left = symbols[size_t(bigram.left)];
      Symbol& right = symbols[size_t(bigram.right)];
      if (left.n == 0 || right.n == 0) continue;
      // Stale: either side changed since this pair was queued.
      if (left.n + right.n != bigram.text.size() ||
          std::string_view(left.text, left.n + right.n) != bigram.text)
        continue;
      left.n += right.n;
      right.n = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[size_t(right.next)].prev = bigram.left;
      add_bigram(left.prev, bigram.left);
      add_bigram(bigram.left, left.next);
    }

    for (const Symbol& sym : symbols) {
      if (sym.n == 0) continue;
      const std::string_view piece(sym.text, sym.n);
      const int32_t id = find_token(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // Not a token: emit the single-byte tokens it contains, dropping what has none.
      for (char c : piece) {
        const int32_t byte_id = find_token(std::string_view(&c, 1));
        if (byte_id >= 0) out.push_back(byte_id);
      }
    }
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && add_bos_) out.push_back(bos_);
  for (const Fragment& f : split_special(text, parse_special)) {
    if (f.token >= 0)
      out.push_back(f.token);
    else
      encode_text(f.text, out);
  }
  if (add_special && add_eos_) out.push_back(eos_);
  if (add_special && add_sep_) out.push_back(sep_);
  return out;
}

std::string BpeTokenizer::token_to_piece(int32_t id, bool special) const {
  check_id(id);
  const uint32_t a = attr(id);
  if (!special && (a & (kAttrUnknown | kAttrControl))) return {};
  const std::string& text = tokens_[size_t(id)];
  if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return text;
  if (!(a & kAttrNormal)) return {};
  std::string piece;
  piece.reserve(text.size());
  bool marked = false;
  for (const uint32_t cp : unicode::decode_utf8(text)) {
    const int byte = unicode::unicode_to_byte(cp);
    if (byte >= 0) {
      piece += char(byte);
      continue;
    }
    // llama.cpp marks code points outside the byte map this way, with the token's whole text
    // after each; here only after the first, so that a token of n such code points gives
    // O(n) bytes, not O(n^2) (the same output for a token with one).
    std::string utf8;
    unicode::append_utf8(utf8, cp);
    piece += "[UNK_BYTE_0x";
    for (unsigned char c : utf8) piece += fmt::format("{:02x}", c);
    piece += (marked ? std::string() : text) + "]";
    marked = true;
  }
  return piece;
}

}  // namespace ps
