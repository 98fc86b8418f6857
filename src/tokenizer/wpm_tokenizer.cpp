#include "tokenizer/wpm_tokenizer.h"

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/unicode_text.h"

namespace ps {
namespace {

constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";  // U+2581

// Hugging Face's WordPiece (max_input_chars_per_word) makes a word of more characters the
// unknown token. llama.cpp has no such limit; for words over 100 characters we follow the
// reference, not llama.cpp. It also bounds the longest-match search to the bytes below.
constexpr size_t kMaxWordChars = 100;
constexpr size_t kMaxWordBytes = kEscapedSpace.size() + 4 * kMaxWordChars;

size_t count_chars(std::string_view utf8) {
  size_t n = 0;
  for (const char c : utf8) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

// CJK ideographs get a word each; the ranges are BERT's (including its 0x2B920 start).
bool is_chinese_char(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace

WpmTokenizer::WpmTokenizer(const gguf::File& file) {
  model_ = "bert";
  pre_ = file.get_string("tokenizer.ggml.pre", "");
  VocabDefaults d;
  d.bos = 101;
  d.unk = 100;
  d.sep = 102;
  d.pad = 0;
  d.mask = 103;
  d.add_bos = true;
  d.add_sep = true;
  d.clean_spaces = true;
  // Older converters store BERT's [CLS] as cls_token_id; it plays the BOS role.
  if (!file.has("tokenizer.ggml.bos_token_id")) {
    if (const gguf::Value* cls = file.find("tokenizer.ggml.cls_token_id"); cls && cls->is_integer())
      d.bos = int32_t(cls->as_int());
  }
  load_vocab(file, d);
  lowercase_ = file.get_bool("tokenizer.ggml.normalizer.lowercase", true);
  strip_accents_ = file.get_bool("tokenizer.ggml.normalizer.strip_accents", lowercase_);
  std::vector<TokenTrie::Entry> entries;
  entries.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) entries.push_back({tokens_[i], int32_t(i)});
  trie_ = TokenTrie(std::move(entries), kMaxWordBytes, false);
}

std::vector<std::string> WpmTokenizer::split_words(std::string_view text) const {
  std::vector<std::string> words(1);
  for (uint32_t cp : unicode::decode_utf8(text)) {
    if (strip_accents_) cp = unicode::nfd_first(cp);
    if (unicode::is_white_space(cp)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (cp == 0 || cp == unicode::kReplacementChar || unicode::is_control(cp)) continue;
    if (strip_accents_ && unicode::is_mark(cp)) continue;
    std::string s;
    unicode::append_utf8(s, lowercase_ ? unicode::to_lower(cp) : cp);
    if (unicode::is_punctuation(cp) || (cp < 0x7F && unicode::is_symbol(cp)) ||
        is_chinese_char(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = std::move(s);
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

int32_t WpmTokenizer::unknown() const {
  // Without one, a word the vocabulary cannot spell has no id (llama.cpp emits -1 here).
  if (unk_ < 0)
    throw ModelError("the WordPiece vocabulary has no unknown token for a word it cannot spell");
  return unk_;
}

void WpmTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  for (const std::string& word : split_words(text)) {
    if (word.empty()) continue;
    if (count_chars(word) > kMaxWordChars) {
      out.push_back(unknown());
      continue;
    }
    const std::string prefixed = std::string(kEscapedSpace) + word;
    const size_t start = out.size();
    // Greedy longest match from each position; if some position matches nothing, the whole
    // word becomes the unknown token.
    for (size_t i = 0; i < prefixed.size();) {
      const auto [id, len] = trie_.longest_prefix(std::string_view(prefixed).substr(i));
      if (id < 0) {
        out.resize(start);
        break;
      }
      out.push_back(id);
      i += len;
    }
    if (out.size() == start) out.push_back(unknown());
  }
}

std::vector<int32_t> WpmTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && add_bos_) out.push_back(bos_);
  for (const Fragment& f : split_special(text, parse_special)) {
    if (f.token >= 0)
      out.push_back(f.token);
    else
      encode_text(f.text, out);
  }
  if (add_special && add_sep_) out.push_back(sep_);
  return out;
}

std::string WpmTokenizer::token_to_piece(int32_t id, bool special) const {
  check_id(id);
  const uint32_t a = attr(id);
  if (!special && (a & (kAttrUnknown | kAttrControl))) return {};
  const std::string& text = tokens_[size_t(id)];
  if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return text;
  if (!(a & kAttrNormal)) return {};
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

}  // namespace ps
