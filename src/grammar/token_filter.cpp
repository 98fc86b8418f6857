#include "grammar/token_filter.h"

#include "tokenizer/tokenizer.h"

namespace ps::grammar {

std::shared_ptr<const VocabPieces> VocabPieces::of(const Tokenizer& tok,
                                                   const std::vector<bool>& shown) {
  auto v = std::make_shared<VocabPieces>();
  v->pieces.resize(size_t(tok.n_vocab()));
  v->end.resize(size_t(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    v->pieces[size_t(id)] = tok.token_to_piece(id, !shown.empty() && shown[size_t(id)]);
    v->end[size_t(id)] = tok.is_eog(id);
  }
  return v;
}

GrammarFilter::GrammarFilter(std::shared_ptr<const Grammar> grammar,
                             std::shared_ptr<const VocabPieces> vocab)
    : m_(std::move(grammar)), vocab_(std::move(vocab)) {}

bool GrammarFilter::allows(int32_t token) const {
  if (token < 0 || size_t(token) >= vocab_->pieces.size()) return false;
  if (vocab_->end[size_t(token)]) return m_.can_end();
  const std::string& piece = vocab_->pieces[size_t(token)];
  // A token with no text (a control token) would let the model stall inside the grammar.
  return !piece.empty() && m_.allows(piece);
}

void GrammarFilter::accept(int32_t token) {
  if (token < 0 || size_t(token) >= vocab_->pieces.size() || vocab_->end[size_t(token)]) return;
  m_.accept(vocab_->pieces[size_t(token)]);
}

}  // namespace ps::grammar
