#pragma once
// Splits text into words before byte-level BPE, with the regex list llama.cpp uses for each
// `tokenizer.ggml.pre` value. Each regex refines the pieces left by the previous one: its
// matches and the gaps between them both become pieces.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

// How a `tokenizer.ggml.pre` value tokenizes, besides its regexes.
struct PreTokenizerConfig {
  std::string name;                  // the canonical name (several aliases share one config)
  std::vector<std::string> regexes;  // in the syntax llama.cpp writes them
  bool ignore_merges = false;        // a word that is a whole token skips the merges
  bool add_bos = false;
  bool clean_spaces = true;
  bool add_sep = false;
  bool no_bos = false;  // the model has no BOS even though gpt2's default says 11
};

// The config for a pre-tokenizer name ("" means llama.cpp's "default"); nullptr if unknown.
const PreTokenizerConfig* find_pre_tokenizer(std::string_view pre);
// Every name find_pre_tokenizer accepts, for error messages and tests.
std::vector<std::string> pre_tokenizer_names();

class PreTokenizer {
 public:
  // Compiles every regex once (PCRE2, UTF + Unicode properties, JIT when available).
  // Throws ModelError when a regex does not compile.
  explicit PreTokenizer(const std::vector<std::string>& regexes);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // The words of `text`, as UTF-8. Invalid UTF-8 bytes become U+FFFD first, as in llama.cpp.
  std::vector<std::string> split(std::string_view text) const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
};

// Rewrites \s and \S into explicit Unicode White_Space classes: PCRE2's \s also matches
// U+180E, which neither Hugging Face tokenizers nor llama.cpp count as whitespace.
std::string expand_white_space_escapes(std::string_view regex);

}  // namespace ps
