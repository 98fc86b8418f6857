#pragma once
// Text <-> token ids, built from a GGUF file's tokenizer.* metadata.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ps::gguf {
class File;
}

namespace ps {

enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Reads tokenizer.ggml.model and friends; throws ModelError / GgufError when unsupported.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);

  // add_special: prepend BOS (and append EOS) as the model's metadata asks.
  // parse_special: text of control / user-defined tokens such as "<s>" becomes that token;
  // when false it is tokenized as plain text.
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
  int32_t bos() const { return bos_; }  // -1 when the model has none
  int32_t eos() const { return eos_; }
  // End of generation: EOS, EOT and the like.
  bool is_eog(int32_t id) const;
  std::string_view model_name() const { return model_; }  // "llama", "gpt2", ...
  std::string_view pre_name() const { return pre_; }

 protected:
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<int32_t> eog_ids_;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  std::string model_, pre_;
};

}  // namespace ps
