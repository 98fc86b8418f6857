#pragma once
// A grammar as the sampler's token filter: a token is allowed when its piece can continue the
// text in the grammar, an end-of-generation token when the text is complete.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "sampling/sampler.h"

namespace ps {
class Tokenizer;
}

namespace ps::grammar {

// The pieces of a vocabulary, computed once per model and shared by every filter.
struct VocabPieces {
  std::vector<std::string> pieces;  // token_to_piece(id, shown[id])
  std::vector<bool> end;            // end-of-generation tokens
  // `shown`: by id, control tokens whose text replies hold (empty: none).
  static std::shared_ptr<const VocabPieces> of(const Tokenizer& tok,
                                               const std::vector<bool>& shown = {});
};

class GrammarFilter : public TokenFilter {
 public:
  GrammarFilter(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabPieces> vocab);
  bool allows(int32_t token) const override;
  void accept(int32_t token) override;
  const Matcher& matcher() const { return m_; }

 private:
  Matcher m_;
  std::shared_ptr<const VocabPieces> vocab_;
};

}  // namespace ps::grammar
