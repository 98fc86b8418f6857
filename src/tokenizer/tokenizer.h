#pragma once
// Text <-> token ids, built from a GGUF file's tokenizer.* metadata. The behaviour follows
// llama.cpp's llama-vocab.cpp so that the same GGUF file gives the same ids in both.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/token_trie.h"

namespace ps::gguf {
class File;
}

namespace ps {

enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Reads tokenizer.ggml.model and friends; throws ModelError / GgufError when unsupported.
  // Supported models: "llama" (SentencePiece), "gpt2" (byte-level BPE), "bert" (WordPiece).
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);

  // add_special: prepend BOS (and append EOS) as the model's metadata asks.
  // parse_special: text of control / unknown tokens such as "<s>" becomes that token;
  // when false it is tokenized as plain text. User-defined tokens are always matched as whole
  // tokens, as Hugging Face tokenizers (and llama.cpp) do for added tokens.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  // The bytes a token stands for (byte tokens decoded, SentencePiece's U+2581 made a space,
  // byte-level BPE unmapped). Control tokens give "" unless `special`.
  virtual std::string token_to_piece(int32_t id, bool special) const = 0;
  // Decodes a sequence; drops the leading space SentencePiece adds after BOS.
  std::string decode(std::span<const int32_t> ids, bool special = false) const;

  int32_t n_vocab() const { return int32_t(tokens_.size()); }
  const std::string& token_text(int32_t id) const { return tokens_.at(size_t(id)); }
  TokenType token_type(int32_t id) const { return types_.at(size_t(id)); }
  float token_score(int32_t id) const { return scores_.at(size_t(id)); }
  // The id of the token whose text is exactly `text`, or -1.
  int32_t find_token(std::string_view text) const;
  int32_t bos() const { return bos_; }  // -1 when the model has none
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  int32_t unk() const { return unk_; }
  int32_t sep() const { return sep_; }
  int32_t pad() const { return pad_; }
  bool adds_bos() const { return add_bos_; }
  bool adds_eos() const { return add_eos_; }
  // End of generation: EOS, EOT and the like.
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  std::string_view model_name() const { return model_; }  // "llama", "gpt2", ...
  std::string_view pre_name() const { return pre_; }
  // The fewest tokens a text of `bytes` bytes can become, where that is known without
  // tokenizing it: byte-level BPE and SentencePiece cover every byte of the text with tokens
  // whose own text is at least as long as what they cover, so no token covers more than the
  // longest token's text. 0 for the others (WordPiece and Unigram drop and fold characters).
  size_t min_tokens(size_t bytes) const {
    const bool covering = model_ == "gpt2" || model_ == "llama";
    return covering && max_token_len_ > 0 ? bytes / max_token_len_ : 0;
  }

 protected:
  // Per-token attribute bits, as llama.cpp keeps them (a token may gain CONTROL on top of its
  // GGUF type, and LSTRIP/RSTRIP come from model-specific rules).
  enum Attr : uint32_t {
    kAttrUnknown = 1u << 0,
    kAttrUnused = 1u << 1,
    kAttrNormal = 1u << 2,
    kAttrControl = 1u << 3,
    kAttrUserDefined = 1u << 4,
    kAttrByte = 1u << 5,
    kAttrLstrip = 1u << 7,
    kAttrRstrip = 1u << 8,
  };

  // What a tokenizer type assumes when the metadata does not say.
  struct VocabDefaults {
    int32_t bos = -1, eos = -1, unk = -1, sep = -1, pad = -1, mask = -1;
    bool add_bos = false, add_eos = false, add_sep = false;
    bool add_space_prefix = false;
    bool clean_spaces = false;  // Hugging Face's clean_up_tokenization_spaces on decode
  };

  // A piece of the input after special tokens were split out: a token id, or raw text.
  struct Fragment {
    int32_t token = -1;  // >= 0: a special token
    std::string_view text;
  };

  Tokenizer() = default;
  // Reads tokens, scores, types, special ids and flags; throws ModelError naming the key.
  void load_vocab(const gguf::File& file, const VocabDefaults& defaults);
  // llama.cpp's tokenizer_st_partition: longest special token first.
  std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;
  uint32_t attr(int32_t id) const { return attrs_[size_t(id)]; }
  void check_id(int32_t id) const;

  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<float> scores_;
  std::vector<uint32_t> attrs_;
  std::vector<int32_t> eog_ids_;      // sorted
  std::vector<int32_t> special_ids_;  // control / user-defined / unknown, longest text first
  TokenTrie special_trie_;            // their texts, to find which occur in a text
  int32_t bos_ = -1, eos_ = -1, unk_ = -1, sep_ = -1, pad_ = -1, mask_ = -1;
  int32_t eot_ = -1, eom_ = -1;
  int32_t fim_pre_ = -1, fim_suf_ = -1, fim_mid_ = -1, fim_pad_ = -1, fim_rep_ = -1, fim_sep_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_sep_ = false;
  bool add_space_prefix_ = false, clean_spaces_ = false;
  size_t max_token_len_ = 0;
  std::string model_, pre_;

 private:
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, TextHash, std::equal_to<>> token_ids_;

  void apply_eog_rules();
  void apply_strip_rules(const gguf::File& file);
};

}  // namespace ps
