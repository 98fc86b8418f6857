#pragma once
// SentencePiece-style tokenizer (tokenizer.ggml.model = "llama"): spaces become U+2581, then
// adjacent pieces merge by the highest token score; pieces that are no token fall back to
// <0xXX> byte tokens.
#include "tokenizer/tokenizer.h"

namespace ps {

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(const gguf::File& file);

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;
  std::string token_to_piece(int32_t id, bool special) const override;

 private:
  // Appends the ids of `text`, whose spaces are already escaped.
  void encode_escaped(const std::string& text, std::vector<int32_t>& out) const;
  int32_t byte_token(uint8_t byte) const;

  int32_t byte_tokens_[256];
};

}  // namespace ps
