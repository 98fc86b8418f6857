#pragma once
// Byte-level BPE (tokenizer.ggml.model = "gpt2"): a regex pre-tokenizer chosen by
// tokenizer.ggml.pre splits the text into words, each word's bytes are mapped to GPT-2's
// printable code points, and adjacent symbols merge by the lowest merge rank.
#include <memory>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ps {

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(const gguf::File& file);
  ~BpeTokenizer() override;

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;
  std::string token_to_piece(int32_t id, bool special) const override;

  // The merge rank of the pair (left, right), or -1 when they do not merge.
  int merge_rank(std::string_view left, std::string_view right) const;

 private:
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;

  const PreTokenizerConfig* config_ = nullptr;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  struct MergeHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Key: 4-byte length of the left part, then both parts (unambiguous for any bytes).
  std::unordered_map<std::string, int, MergeHash, std::equal_to<>> merge_ranks_;
};

}  // namespace ps
