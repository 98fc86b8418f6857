#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/wpm_tokenizer.h"

namespace ps {
namespace {

constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";

[[noreturn]] void fail(const gguf::File& file, std::string_view key, const std::string& what) {
  throw ModelError(fmt::format("{}: metadata '{}': {}", file.path(), key, what));
}

const gguf::Array* find_typed_array(const gguf::File& file, std::string_view key,
                                    std::initializer_list<gguf::ValueType> elem_types) {
  const gguf::Value* v = file.find(key);
  if (!v) return nullptr;
  if (v->type != gguf::ValueType::ARRAY)
    fail(file, key, fmt::format("expected an array, found {}", gguf::value_type_name(v->type)));
  const gguf::Array& a = *v->arr;
  if (std::find(elem_types.begin(), elem_types.end(), a.elem_type) == elem_types.end())
    fail(file, key,
         fmt::format("array elements are {}, which this key cannot hold",
                     gguf::value_type_name(a.elem_type)));
  return &a;
}

bool read_bool(const gguf::File& file, std::string_view key, bool def) {
  const gguf::Value* v = file.find(key);
  if (!v) return def;
  if (v->type != gguf::ValueType::BOOL && !v->is_integer())
    fail(file, key, fmt::format("expected a bool, found {}", gguf::value_type_name(v->type)));
  return v->type == gguf::ValueType::U64 ? v->u != 0 : v->as_int() != 0;
}

TokenType type_from_gguf(int64_t t) {
  return t >= 0 && t <= 6 ? TokenType(t) : TokenType::Undefined;
}

// The passes llama.cpp applies when a tokenizer asks for clean_up_tokenization_spaces.
std::string clean_up_spaces(std::string text) {
  const size_t total1 = text.size();
  size_t total = total1 ? 1 : 0;
  for (size_t i = 1; i < total1; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
    text[total++] = x;
  }
  const size_t total2 = total;
  total = total ? 1 : 0;
  for (size_t i = 1; i < total2; ++i) {
    const char x = text[i];
    if (x == '\'' && i + 1 < total2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
      total--;
      text[++i] = '\0';
    }
    text[total++] = x;
  }
  const size_t total3 = total;
  total = total ? 1 : 0;
  for (size_t i = 1; i < total3; ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
      const char x1 = text[i + 1];
      if (x1 == 's' || x1 == 'm') {
        total--;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < total3) {
        const char x2 = text[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) total--;
      }
    }
    text[total++] = x;
  }
  text.resize(total);
  return text;
}

// The bytes of a text that special tokens have taken (or that their strip rules removed), as
// disjoint intervals; the rest is still text.
class TakenBytes {
 public:
  // Whether [begin, end) is all still text.
  bool free(size_t begin, size_t end) const {
    auto it = taken_.upper_bound(begin);
    if (it != taken_.begin() && std::prev(it)->second > begin) return false;
    return it == taken_.end() || it->first >= end;
  }
  void take(size_t begin, size_t end) {
    auto next = taken_.lower_bound(begin);
    if (next != taken_.begin() && std::prev(next)->second == begin) {
      --next;
      next->second = end;
    } else {
      next = taken_.emplace_hint(next, begin, end);
    }
    if (auto after = std::next(next); after != taken_.end() && after->first == end) {
      next->second = after->second;
      taken_.erase(after);
    }
  }
  // Calls f(begin, end) for each run of text left in [0, size), in order.
  template <class F>
  void for_each_free(size_t size, F&& f) const {
    size_t at = 0;
    for (const auto& [begin, end] : taken_) {
      if (begin > at) f(at, begin);
      at = end;
    }
    if (at < size) f(at, size);
  }

 private:
  std::map<size_t, size_t> taken_;
};

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  constexpr std::string_view kModelKey = "tokenizer.ggml.model";
  const gguf::Value* v = file.find(kModelKey);
  if (!v) fail(file, kModelKey, "is missing (the file has no tokenizer)");
  if (v->type != gguf::ValueType::STRING)
    fail(file, kModelKey,
         fmt::format("expected a string, found {}", gguf::value_type_name(v->type)));
  const std::string model(v->str);
  if (model == "llama") return std::make_unique<SpmTokenizer>(file);
  if (model == "gpt2") return std::make_unique<BpeTokenizer>(file);
  if (model == "bert") return std::make_unique<WpmTokenizer>(file);
  fail(file, kModelKey,
       fmt::format("tokenizer model '{}' is not supported (supported: llama, gpt2, bert)", model));
}

void Tokenizer::load_vocab(const gguf::File& file, const VocabDefaults& d) {
  const gguf::Array* tokens = find_typed_array(file, kTokensKey, {gguf::ValueType::STRING});
  if (!tokens) fail(file, kTokensKey, "is missing (the file has no vocabulary)");
  if (tokens->count == 0) fail(file, kTokensKey, "the vocabulary is empty");
  // The largest vocabularies released hold 262,144 tokens; sixteen times that bounds what a
  // hostile file can make the maps below cost (about 100 bytes a token).
  constexpr uint64_t kMaxVocab = uint64_t(1) << 22;
  if (tokens->count > kMaxVocab)
    fail(file, kTokensKey,
         fmt::format("{} tokens is more than the {} a vocabulary may hold", tokens->count,
                     kMaxVocab));
  const size_t n = size_t(tokens->count);

  const gguf::Array* scores = find_typed_array(
      file, kScoresKey, {gguf::ValueType::F32, gguf::ValueType::F64, gguf::ValueType::I32});
  if (scores && scores->count != n)
    fail(file, kScoresKey,
         fmt::format("has {} entries but {} has {}", scores->count, kTokensKey, n));
  const gguf::Array* types = find_typed_array(
      file, kTypesKey,
      {gguf::ValueType::I32, gguf::ValueType::U32, gguf::ValueType::I8, gguf::ValueType::U8,
       gguf::ValueType::I16, gguf::ValueType::U16, gguf::ValueType::I64, gguf::ValueType::U64});
  if (types && types->count != n)
    fail(file, kTypesKey, fmt::format("has {} entries but {} has {}", types->count, kTokensKey, n));

  // A U64 type above int64's range is no type we know (int_at would refuse it).
  auto type_at = [&](size_t i) {
    if (!types) return TokenType::Normal;
    if (types->elem_type != gguf::ValueType::U64) return type_from_gguf(types->int_at(i));
    uint64_t u;
    std::memcpy(&u, types->raw + i * 8, 8);
    return type_from_gguf(u <= 6 ? int64_t(u) : -1);
  };
  tokens_.resize(n);
  types_.resize(n);
  scores_.resize(n);
  attrs_.resize(n);
  token_ids_.clear();
  token_ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string text(tokens->string_at(i));
    // An empty token could never be matched; llama.cpp gives it a placeholder name.
    if (text.empty()) text = fmt::format("[EMPTY_{}]", i);
    const auto [it, inserted] = token_ids_.emplace(text, int32_t(i));
    if (!inserted)
      fail(file, kTokensKey, fmt::format("token {} '{}' duplicates token {}", i, text, it->second));
    max_token_len_ = std::max(max_token_len_, text.size());
    tokens_[i] = std::move(text);
    scores_[i] = scores ? float(scores->double_at(i)) : 0.0f;
    // Scores order merges: NaN or an infinity would make that order meaningless.
    if (!std::isfinite(scores_[i]))
      fail(file, kScoresKey,
           fmt::format("score {} of token {} is not a finite number", scores_[i], i));
    types_[i] = type_at(i);
    switch (types_[i]) {
      case TokenType::Normal:
        attrs_[i] = kAttrNormal;
        break;
      case TokenType::Unknown:
        attrs_[i] = kAttrUnknown;
        break;
      case TokenType::Control:
        attrs_[i] = kAttrControl;
        break;
      case TokenType::UserDefined:
        attrs_[i] = kAttrUserDefined;
        break;
      case TokenType::Unused:
        attrs_[i] = kAttrUnused;
        break;
      case TokenType::Byte:
        attrs_[i] = kAttrByte;
        break;
      default:
        attrs_[i] = 0;
        break;  // undefined: never printed, never matched as special
    }
  }

  // Special ids: the tokenizer type's default unless the metadata names one. A stored
  // 0xFFFFFFFF (or -1) means "none".
  auto in_range = [&](int32_t id) { return id >= 0 && size_t(id) < n ? id : -1; };
  auto read_id = [&](std::string_view key, int32_t def) -> int32_t {
    const gguf::Value* val = file.find(key);
    if (!val) return def;
    if (!val->is_integer())
      fail(file, key,
           fmt::format("expected an integer, found {}", gguf::value_type_name(val->type)));
    const bool is_unsigned = val->type == gguf::ValueType::U8 ||
                             val->type == gguf::ValueType::U16 ||
                             val->type == gguf::ValueType::U32 || val->type == gguf::ValueType::U64;
    if (is_unsigned ? (val->u == 0xFFFFFFFFull || val->u == ~0ull) : val->i == -1) return -1;
    const bool ok = is_unsigned ? val->u < n : (val->i >= 0 && uint64_t(val->i) < n);
    if (!ok)
      fail(file, key,
           fmt::format("token id {} is outside the vocabulary of {} tokens",
                       is_unsigned ? fmt::to_string(val->u) : fmt::to_string(val->i), n));
    return int32_t(is_unsigned ? int64_t(val->u) : val->i);
  };
  bos_ = read_id("tokenizer.ggml.bos_token_id", in_range(d.bos));
  eos_ = read_id("tokenizer.ggml.eos_token_id", in_range(d.eos));
  eot_ = read_id("tokenizer.ggml.eot_token_id", -1);
  eom_ = read_id("tokenizer.ggml.eom_token_id", -1);
  unk_ = read_id("tokenizer.ggml.unknown_token_id", in_range(d.unk));
  sep_ = read_id("tokenizer.ggml.seperator_token_id", in_range(d.sep));
  pad_ = read_id("tokenizer.ggml.padding_token_id", in_range(d.pad));
  mask_ = read_id("tokenizer.ggml.mask_token_id", in_range(d.mask));
  fim_pre_ =
      read_id("tokenizer.ggml.fim_pre_token_id", read_id("tokenizer.ggml.prefix_token_id", -1));
  fim_suf_ =
      read_id("tokenizer.ggml.fim_suf_token_id", read_id("tokenizer.ggml.suffix_token_id", -1));
  fim_mid_ =
      read_id("tokenizer.ggml.fim_mid_token_id", read_id("tokenizer.ggml.middle_token_id", -1));
  fim_pad_ = read_id("tokenizer.ggml.fim_pad_token_id", -1);
  fim_rep_ = read_id("tokenizer.ggml.fim_rep_token_id", -1);
  fim_sep_ = read_id("tokenizer.ggml.fim_sep_token_id", -1);

  add_space_prefix_ = read_bool(file, "tokenizer.ggml.add_space_prefix", d.add_space_prefix);
  add_bos_ = read_bool(file, "tokenizer.ggml.add_bos_token", d.add_bos) && bos_ >= 0;
  add_eos_ = read_bool(file, "tokenizer.ggml.add_eos_token", d.add_eos) && eos_ >= 0;
  add_sep_ = read_bool(file, "tokenizer.ggml.add_sep_token", d.add_sep) && sep_ >= 0;
  clean_spaces_ = d.clean_spaces;

  apply_eog_rules();

  special_ids_.clear();
  for (size_t i = 0; i < n; ++i)
    if (attrs_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown))
      special_ids_.push_back(int32_t(i));
  std::stable_sort(special_ids_.begin(), special_ids_.end(), [&](int32_t a, int32_t b) {
    return tokens_[size_t(a)].size() > tokens_[size_t(b)].size();
  });

  apply_strip_rules(file);

  std::vector<TokenTrie::Entry> entries;
  entries.reserve(special_ids_.size());
  for (const int32_t id : special_ids_) entries.push_back({tokens_[size_t(id)], id});
  special_trie_ = TokenTrie(std::move(entries), max_token_len_, true);
}

void Tokenizer::apply_eog_rules() {
  // Token texts that mark turn or document ends, as llama.cpp recognises them. Tokens found
  // this way become control tokens even if the converter typed them otherwise.
  auto make_control = [&](int32_t id) {
    attrs_[size_t(id)] |= kAttrControl;
    if (types_[size_t(id)] != TokenType::Control) types_[size_t(id)] = TokenType::Control;
  };
  auto detect = [&](int32_t& slot, std::initializer_list<std::string_view> texts) {
    if (slot >= 0) return;
    // llama.cpp walks a hash map here, so with several candidates its pick is arbitrary;
    // the lowest id keeps ours deterministic.
    for (std::string_view t : texts) {
      const int32_t id = find_token(t);
      if (id >= 0 && (slot < 0 || id < slot)) slot = id;
    }
    if (slot >= 0) make_control(slot);
  };
  detect(eot_, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
                "<end_of_utterance>"});
  detect(eom_, {"<|eom_id|>"});
  detect(fim_pre_, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                    "▁<PRE>", "<|code_prefix|>", "<|prefix|>"});
  detect(fim_suf_, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                    "▁<SUF>", "<|code_suffix|>", "<|suffix|>"});
  detect(fim_mid_, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                    "▁<MID>", "<|code_middle|>", "<|middle|>"});
  detect(fim_pad_, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
  detect(fim_rep_, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  detect(fim_sep_, {"<|file_sep|>"});

  static constexpr std::string_view kEogTexts[] = {"<|eot_id|>",
                                                   "<|im_end|>",
                                                   "<|end|>",
                                                   "<|return|>",
                                                   "<|call|>",
                                                   "<|flush|>",
                                                   "<|calls|>",
                                                   "<end_of_turn>",
                                                   "<|endoftext|>",
                                                   "</s>",
                                                   "<|eom_id|>",
                                                   "<EOT>",
                                                   "_<EOT>",
                                                   "[EOT]",
                                                   "[EOS]",
                                                   "<|end_of_text|>",
                                                   "<end_of_utterance>",
                                                   "<eos>",
                                                   "<turn|>",
                                                   "<|tool_response>",
                                                   "<｜end▁of▁sentence｜>",
                                                   "[e~["};
  std::vector<int32_t> eog;
  for (int32_t id : {fim_pad_, fim_rep_, fim_sep_})
    if (id >= 0) eog.push_back(id);
  for (std::string_view t : kEogTexts) {
    const int32_t id = find_token(t);
    if (id < 0) continue;
    eog.push_back(id);
    make_control(id);
  }
  // These always render as text (gpt-oss's channel markup).
  for (std::string_view t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    const int32_t id = find_token(t);
    if (id >= 0) {
      attrs_[size_t(id)] = kAttrUserDefined;
      types_[size_t(id)] = TokenType::UserDefined;
    }
  }
  for (int32_t id : {eos_, eot_, eom_})
    if (id >= 0) eog.push_back(id);
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());

  auto has = [&](std::string_view t) {
    const int32_t id = find_token(t);
    return id >= 0 && std::binary_search(eog.begin(), eog.end(), id);
  };
  // In harmony-style chat formats "<|end|>" ends a message, not the generation.
  if (has("<|end|>") &&
      ((has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>")))) {
    const int32_t id = find_token("<|end|>");
    eog.erase(std::find(eog.begin(), eog.end(), id));
    attrs_[size_t(id)] = kAttrUserDefined;
    types_[size_t(id)] = TokenType::UserDefined;
  }
  if (has("<|tool_response>") && has("</s>")) {
    const int32_t id = find_token("</s>");
    eog.erase(std::find(eog.begin(), eog.end(), id));
    attrs_[size_t(id)] = kAttrNormal;
    types_[size_t(id)] = TokenType::Normal;
  }
  eog_ids_ = std::move(eog);
}

void Tokenizer::apply_strip_rules(const gguf::File& file) {
  auto contains_any = [](const std::string& s, std::initializer_list<std::string_view> parts) {
    for (auto p : parts)
      if (s.find(p) != std::string::npos) return true;
    return false;
  };
  auto set = [&](std::string_view text, uint32_t bit, bool on) {
    const int32_t id = find_token(text);
    if (id < 0) return;
    attrs_[size_t(id)] = on ? (attrs_[size_t(id)] | bit) : (attrs_[size_t(id)] & ~bit);
  };
  std::string name = file.get_string("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  const std::string arch = file.get_string("general.architecture", "");
  if (contains_any(pre_, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains_any(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set("<mask>", kAttrLstrip, true);
  } else if (contains_any(name, {"phi-3", "phi3"})) {
    for (int32_t id : special_ids_) attrs_[size_t(id)] |= kAttrRstrip;
    set("</s>", kAttrRstrip, true);
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, kAttrRstrip, false);
  } else if (contains_any(name, {"modern-bert"})) {
    set("[MASK]", kAttrLstrip, true);
  }
}

int32_t Tokenizer::find_token(std::string_view text) const {
  const auto it = token_ids_.find(text);
  return it == token_ids_.end() ? -1 : it->second;
}

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= n_vocab())
    throw UsageError(
        fmt::format("token id {} is outside the vocabulary of {} tokens", id, n_vocab()));
}

std::vector<Tokenizer::Fragment> Tokenizer::split_special(std::string_view text,
                                                          bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  // llama.cpp's order: each special token in turn, longest first, then the lowest id, takes
  // every leftmost non-overlapping occurrence of itself in the text the tokens before it left.
  // Only tokens that occur in the text matter, found in one pass. Those of one length are
  // then found together in one more pass over the text still free, and take their places in
  // order of id: the time is the text times the number of distinct lengths, not of tokens.
  std::vector<int32_t> present = special_trie_.tokens_in(text);
  std::erase_if(present, [&](int32_t id) {
    return !parse_special && (attrs_[size_t(id)] & (kAttrControl | kAttrUnknown));
  });
  std::sort(present.begin(), present.end(), [&](int32_t l, int32_t r) {
    const size_t nl = tokens_[size_t(l)].size(), nr = tokens_[size_t(r)].size();
    return nl != nr ? nl > nr : l < r;
  });
  TakenBytes taken;
  std::vector<std::pair<size_t, int32_t>> placed;  // (offset, token)
  for (size_t first = 0; first < present.size();) {
    const size_t len = tokens_[size_t(present[first])].size();
    size_t last = first;
    std::vector<TokenTrie::Entry> entries;
    for (; last < present.size() && tokens_[size_t(present[last])].size() == len; ++last)
      entries.push_back({tokens_[size_t(present[last])], present[last]});
    first = last;
    const TokenTrie same_length(std::move(entries), len, true);
    std::vector<std::pair<int32_t, size_t>> found;  // (token, offset): by id, then leftmost
    taken.for_each_free(text.size(), [&](size_t begin, size_t end) {
      for (const auto& o : same_length.occurrences(text.substr(begin, end - begin)))
        found.push_back({o.token, begin + o.end - len});
    });
    std::sort(found.begin(), found.end());
    for (const auto& [id, at] : found) {
      if (!taken.free(at, at + len)) continue;  // overlaps a token placed before it
      size_t begin = at, end = at + len;
      const uint32_t a = attrs_[size_t(id)];
      if (a & kAttrLstrip)
        while (begin > 0 && is_space(text[begin - 1]) && taken.free(begin - 1, begin)) --begin;
      if (a & kAttrRstrip)
        while (end < text.size() && is_space(text[end]) && taken.free(end, end + 1)) ++end;
      taken.take(begin, end);
      placed.push_back({at, id});
    }
  }
  std::sort(placed.begin(), placed.end());
  size_t next_token = 0;
  taken.for_each_free(text.size(), [&](size_t begin, size_t end) {
    for (; next_token < placed.size() && placed[next_token].first < begin; ++next_token)
      frags.push_back({placed[next_token].second, {}});
    frags.push_back({-1, text.substr(begin, end - begin)});
  });
  for (; next_token < placed.size(); ++next_token) frags.push_back({placed[next_token].second, {}});
  return frags;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool special) const {
  std::string out;
  size_t i = 0;
  // The space a SentencePiece tokenizer puts before the first word is not part of the text.
  bool strip_space = add_space_prefix_;
  if (!ids.empty() && bos_ >= 0 && ids[0] == bos_) {
    out += token_to_piece(ids[0], special);
    i = 1;
  }
  for (; i < ids.size(); ++i) {
    std::string piece = token_to_piece(ids[i], special);
    if (strip_space && !piece.empty() && piece.front() == ' ') piece.erase(0, 1);
    strip_space = false;
    out += piece;
  }
  return clean_spaces_ ? clean_up_spaces(std::move(out)) : out;
}

}  // namespace ps
