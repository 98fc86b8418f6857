#include "tokenizer/spm_tokenizer.h"

#include <fmt/format.h>

#include <queue>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/unicode_text.h"

namespace ps {
namespace {

constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";  // U+2581

struct Symbol {
  int prev;
  int next;
  const char* text;
  size_t n;
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;
};

// Highest score first; on a tie, the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

SpmTokenizer::SpmTokenizer(const gguf::File& file) {
  model_ = "llama";
  pre_ = file.get_string("tokenizer.ggml.pre", "");
  VocabDefaults d;
  d.bos = 1;
  d.eos = 2;
  d.unk = 0;
  d.add_bos = true;
  d.add_space_prefix = true;
  load_vocab(file, d);

  // "<0xXX>" tokens, else the byte itself as a one-character token (llama.cpp's order).
  for (int b = 0; b < 256; ++b) {
    int32_t id = find_token(fmt::format("<0x{:02X}>", b));
    if (id < 0) id = find_token(std::string(1, char(b)));
    byte_tokens_[b] = id;
  }
}

int32_t SpmTokenizer::byte_token(uint8_t byte) const {
  if (byte_tokens_[byte] >= 0) return byte_tokens_[byte];
  if (unk_ >= 0) return unk_;
  throw ModelError(fmt::format(
      "tokenizer has neither a byte token for 0x{:02X} nor an unknown token to stand in", byte));
}

void SpmTokenizer::encode_escaped(const std::string& text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  size_t offs = 0;
  int index = 0;
  while (offs < text.size()) {
    Symbol sym;
    sym.text = text.data() + offs;
    sym.n = std::min(unicode::utf8_sequence_length(text[offs]), text.size() - offs);
    offs += sym.n;
    sym.prev = index - 1;
    sym.next = offs == text.size() ? -1 : index + 1;
    ++index;
    symbols.push_back(sym);
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string_view merged(symbols[size_t(left)].text,
                                  symbols[size_t(left)].n + symbols[size_t(right)].n);
    const int32_t id = find_token(merged);
    if (id < 0) return;
    queue.push({left, right, scores_[size_t(id)], merged.size()});
  };

  for (int i = 1; i < int(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[size_t(bigram.left)];
    Symbol& right = symbols[size_t(bigram.right)];
    // Stale: one side was merged into something else since this pair was queued.
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = bigram.left;
    try_add_bigram(left.prev, bigram.left);
    try_add_bigram(bigram.left, left.next);
  }

  // llama.cpp (after SentencePiece) resegments a symbol that is no token by the pair that last
  // formed its text, kept in a map of every merged text. But a pair is queued only when its
  // text is a token, so that map holds token texts alone and is never consulted with one: the
  // ids are the same without it, and neither the merged texts of the whole input (memory) nor
  // a recursion as deep as the merges (stack) is needed.
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[size_t(i)].next) {
    const Symbol& symbol = symbols[size_t(i)];
    const int32_t id = find_token(std::string_view(symbol.text, symbol.n));
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (size_t j = 0; j < symbol.n; ++j) out.push_back(byte_token(uint8_t(symbol.text[j])));
  }
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && add_bos_) out.push_back(bos_);
  // A text piece at the start or right after a special token gets the space prefix.
  bool prev_special = true;
  for (const Fragment& f : split_special(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    std::string escaped;
    escaped.reserve(f.text.size() + 8);
    if (add_space_prefix_ && prev_special) escaped += kEscapedSpace;
    for (char c : f.text) {
      if (c == ' ')
        escaped += kEscapedSpace;
      else
        escaped += c;
    }
    encode_escaped(escaped, out);
    prev_special = false;
  }
  if (add_special && add_eos_) out.push_back(eos_);
  return out;
}

std::string SpmTokenizer::token_to_piece(int32_t id, bool special) const {
  check_id(id);
  const uint32_t a = attr(id);
  if (!special && (a & (kAttrUnknown | kAttrControl))) return {};
  const std::string& text = tokens_[size_t(id)];
  if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return text;
  if (a & kAttrNormal) {
    std::string piece;
    piece.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, kEscapedSpace.size(), kEscapedSpace) == 0) {
        piece += ' ';
        i += kEscapedSpace.size();
      } else {
        piece += text[i++];
      }
    }
    return piece;
  }
  if (a & kAttrByte) {
    // "<0xXX>": llama.cpp reads the two hex digits and takes 0 for anything else.
    int value = 0;
    if (text.size() >= 5) {
      const int hi = hex_value(text[3]), lo = hex_value(text[4]);
      if (hi >= 0) value = lo >= 0 ? hi * 16 + lo : hi;
    }
    return std::string(1, char(value));
  }
  return {};
}

}  // namespace ps
