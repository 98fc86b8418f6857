#pragma once
// WordPiece (tokenizer.ggml.model = "bert"): BERT's normaliser (lowercase, accents stripped,
// punctuation and CJK characters split off), then the longest vocabulary match from the
// start of each word. Word-initial pieces carry U+2581 in GGUF vocabularies.
#include "tokenizer/token_trie.h"
#include "tokenizer/tokenizer.h"

namespace ps {

class WpmTokenizer final : public Tokenizer {
 public:
  explicit WpmTokenizer(const gguf::File& file);

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;
  std::string token_to_piece(int32_t id, bool special) const override;

  // BERT's pre-tokenization: normalised words, punctuation as words of its own.
  std::vector<std::string> split_words(std::string_view text) const;

 private:
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  int32_t unknown() const;  // the unknown token; a ModelError when the vocabulary has none

  bool lowercase_ = true;
  bool strip_accents_ = true;
  TokenTrie trie_;  // every token short enough to match within a word
};

}  // namespace ps
