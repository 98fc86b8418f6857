#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/unicode_text.h"

namespace ps {
namespace {

// The regex strings below are llama.cpp's (llama-vocab.cpp), which adapts the patterns of the
// models' tokenizer.json files: `(?i:...)` is spelled out case by case. One change: llama.cpp
// writes the Lu/Ll split of some patterns as a group per character, `((?=[\p{L}])([^a-z]))*`
// (a letter that is not a-z). PCRE2's JIT keeps a stack frame for every iteration of such a
// group, so a word of a few hundred thousand letters overflowed the stack and then the
// interpreter's match limit. The same set as one class, `[^\P{L}a-z]*`, repeats in constant
// space; with marks it is "not N, P, S, Z or C", since the general categories partition the code
// points. tests/unit/tokenizer_test.cpp checks both spellings split alike.

constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kQwen35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}"
    "\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Cased letters, spelled as escapes: several of them have canonical singleton
// decompositions, and a text editor that normalises to NFC would silently change them.
constexpr const char* kDeepseekLlmLetters =
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-"
    "\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-"
    "\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"
    "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-"
    "\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"
    "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-"
    "\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}"
    "-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-"
    "\\x{118DF}\\x{1E900}-\\x{1E943}]+";

// llama.cpp's "\\s?[!-/:-~！-／：-～‘-‟　-。]+" runs on text whose non-ASCII whitespace was
// replaced by U+000B, so U+3000 can only ever match the "\\s?"; the class here starts at U+3001
// to give the same words.
constexpr const char* kDeepseekLlmPunct = "\\s?[!-/:-~！-／：-～‘-‟、-。]+";

constexpr const char* kDeepseekV3Main =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}"
    "\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

#define PS_NOT_LOWER "[^\\P{L}a-z]"
#define PS_NOT_UPPER "[^\\P{L}A-Z]"
#define PS_NOT_LOWER_OR_MARK "[^\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}a-z]"
#define PS_NOT_UPPER_OR_MARK "[^\\p{N}\\p{P}\\p{S}\\p{Z}\\p{C}A-Z]"
#define PS_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

constexpr const char* kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?" PS_NOT_LOWER "*" PS_NOT_UPPER "+|[^\\r\\n\\p{L}\\p{N}]?" PS_NOT_LOWER
    "+" PS_NOT_UPPER "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?" PS_NOT_LOWER "*" PS_NOT_UPPER "+" PS_CONTRACTIONS
    "?|[^\\r\\n\\p{L}\\p{N}]?" PS_NOT_LOWER "+" PS_NOT_UPPER "*" PS_CONTRACTIONS
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kGraniteEmbedMulti =
    "[^\\r\\n\\p{L}\\p{N}]?" PS_NOT_LOWER_OR_MARK "*" PS_NOT_UPPER_OR_MARK "+" PS_CONTRACTIONS
    "?|[^\\r\\n\\p{L}\\p{N}]?" PS_NOT_LOWER_OR_MARK "+" PS_NOT_UPPER_OR_MARK "*" PS_CONTRACTIONS
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kJais2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|"
    "\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|"
    "\\s{1,2}(?!\\S)|\\s{1}";

// llama.cpp's words of letters, marks and single spaces, `(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+`,
// as one letter, then letters and marks, then space-led runs of them: the same longest match, but
// possessive, so PCRE2 keeps no frame per letter (16 MiB of letters hit its match limit).
constexpr const char* kExaoneMoe = PS_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}[\\p{L}\\p{M}]*+(?: \\p{L}[\\p{L}\\p{M}]*+)*+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";

#undef PS_NOT_LOWER
#undef PS_NOT_UPPER
#undef PS_NOT_LOWER_OR_MARK
#undef PS_NOT_UPPER_OR_MARK
#undef PS_CONTRACTIONS

constexpr const char* kSeedCoder =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kBailingMoe =
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";

constexpr const char* kMiniCpm5 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kUfakzeka =
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!"
    "\\S)|\\s+";

constexpr const char* kBloom = " ?[^(\\s|.,!?…。，、।۔،)]+";

struct Entry {
  std::vector<std::string> aliases;
  PreTokenizerConfig config;
};

std::vector<Entry> build_table() {
  auto cfg = [](std::string name, std::vector<std::string> regexes) {
    PreTokenizerConfig c;
    c.name = std::move(name);
    c.regexes = std::move(regexes);
    return c;
  };
  auto no_clean = [](PreTokenizerConfig c) {
    c.clean_spaces = false;
    return c;
  };

  std::vector<Entry> t;
  t.push_back({{"", "default"},
               cfg("default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"})});
  {
    auto c = cfg("llama3", {kLlama3});
    c.ignore_merges = true;
    c.add_bos = true;
    t.push_back({{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                  "lfm2", "jina-v5-nano"},
                 c});
  }
  t.push_back({{"dbrx"}, cfg("dbrx", {kLlama3})});
  t.push_back({{"smaug-bpe"}, cfg("smaug-bpe", {kLlama3})});
  t.push_back({{"deepseek-llm"},
               no_clean(cfg("deepseek-llm", {"[\r\n]", kDeepseekLlmLetters, kDeepseekLlmPunct,
                                             "\\s+$", "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"}))});
  t.push_back({{"deepseek-coder"},
               no_clean(cfg("deepseek-coder", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
                                               "[一-龥ࠀ-一가-퟿]+", "\\p{N}"}))});
  t.push_back(
      {{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"},
       no_clean(cfg("deepseek-v3", {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", kDeepseekV3Main}))});
  t.push_back({{"spark2_5"},
               no_clean(cfg("spark2_5",
                            {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
                             "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}"
                             "\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|"
                             "\\s+",
                             "\\p{N}"}))});
  t.push_back(
      {{"falcon"}, cfg("falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"})});
  t.push_back({{"mpt"}, cfg("mpt", {kGpt2})});
  t.push_back({{"olmo"}, cfg("olmo", {kGpt2})});
  t.push_back({{"jais"}, cfg("jais", {kGpt2})});
  t.push_back({{"exaone4"}, cfg("exaone4", {kGpt2})});
  t.push_back({{"trillion"}, no_clean(cfg("trillion", {kGpt2}))});
  t.push_back({{"granite-docling"}, no_clean(cfg("granite-docling", {kGpt2}))});
  t.push_back({{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                "a.x-4.0", "mellum", "modern-bert"},
               cfg("gpt-2", {kGpt2})});
  {
    auto c = cfg("roberta-bpe", {kGpt2});
    c.add_sep = true;
    t.push_back({{"jina-v1-en", "jina-v2-code", "roberta-bpe"}, c});
  }
  t.push_back({{"jais-2"}, cfg("jais-2", {kJais2})});
  t.push_back({{"starcoder"}, cfg("starcoder", {"\\p{N}", kGpt2})});
  t.push_back({{"refact"}, cfg("refact", {"\\p{N}", kGpt2})});
  t.push_back({{"command-r"}, no_clean(cfg("command-r", {"\\p{N}", kGpt2}))});
  t.push_back({{"smollm"}, no_clean(cfg("smollm", {"\\p{N}", kGpt2}))});
  t.push_back({{"codeshell"}, cfg("codeshell", {"\\p{N}", kGpt2})});
  t.push_back({{"exaone"}, cfg("exaone", {"\\p{N}", kGpt2})});
  t.push_back({{"minerva-7b"}, cfg("minerva-7b", {"\\p{N}", kGpt2})});
  t.push_back({{"mellum2"}, cfg("mellum2", {"\\p{N}", kGpt2})});
  t.push_back(
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"}, no_clean(cfg("qwen2", {kQwen2}))});
  t.push_back({{"megrez"}, cfg("megrez", {kQwen2})});
  t.push_back({{"stablelm2"}, cfg("stablelm2", {kQwen2})});
  t.push_back({{"hunyuan"}, no_clean(cfg("hunyuan", {kQwen2}))});
  t.push_back({{"solar-open"}, no_clean(cfg("solar-open", {kQwen2}))});
  t.push_back({{"grok-2"}, no_clean(cfg("grok-2", {kQwen2}))});
  t.push_back({{"qwen35"}, no_clean(cfg("qwen35", {kQwen35}))});
  t.push_back({{"poro-chat"}, no_clean(cfg("poro-chat", {kBloom}))});
  t.push_back({{"bloom"}, cfg("bloom", {kBloom})});
  t.push_back({{"gpt3-finnish"}, cfg("gpt3-finnish", {kBloom})});
  {
    auto c = cfg("chatglm-bpe", {kLlama3});
    c.no_bos = true;
    t.push_back({{"chatglm-bpe", "glm4"}, c});
  }
  t.push_back({{"viking"}, no_clean(cfg("viking", {kBloom, "\\p{N}"}))});
  {
    auto c = no_clean(cfg("tekken", {kTekken}));
    c.ignore_merges = true;
    c.add_bos = true;
    t.push_back({{"tekken"}, c});
  }
  {
    auto c = no_clean(
        cfg("chameleon", {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                          "([\\t\\n]|    |  )", "\\p{N}", "[\\p{P}!-/:-@\\[-`{-~]", kGpt2}));
    c.add_bos = true;
    t.push_back({{"chameleon"}, c});
  }
  t.push_back({{"gpt-4o", "llama4", "kanana2", "talkie"}, no_clean(cfg("gpt-4o", {kGpt4o}))});
  t.push_back({{"minimax-m2"}, no_clean(cfg("minimax-m2", {kGpt4o}))});
  {
    auto c = no_clean(cfg("granite-embed-multi-97m", {kGraniteEmbedMulti}));
    c.ignore_merges = true;
    t.push_back({{"granite-embed-multi-97m"}, c});
  }
  t.push_back({{"exaone-moe"}, cfg("exaone-moe", {kExaoneMoe})});
  t.push_back({{"seed-coder"}, no_clean(cfg("seed-coder", {kSeedCoder}))});
  t.push_back(
      {{"bailingmoe", "bailingmoe2", "llada-moe"}, no_clean(cfg("bailingmoe", {kBailingMoe}))});
  {
    auto c = cfg("minicpm5", {"\\p{N}{1,3}", kMiniCpm5});
    c.ignore_merges = true;
    t.push_back({{"minicpm5"}, c});
  }
  t.push_back({{"ufakzeka"}, no_clean(cfg("ufakzeka", {kUfakzeka}))});
  return t;
}

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = build_table();
  return t;
}

// Unicode White_Space without the surrounding brackets.
constexpr std::string_view kWhiteSpaceSet =
    "\\t-\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
    "\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return fmt::format("error {}", code);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

const PreTokenizerConfig* find_pre_tokenizer(std::string_view pre) {
  for (const auto& e : table())
    for (const auto& alias : e.aliases)
      if (alias == pre) return &e.config;
  return nullptr;
}

std::vector<std::string> pre_tokenizer_names() {
  std::vector<std::string> names;
  for (const auto& e : table())
    for (const auto& alias : e.aliases)
      if (!alias.empty()) names.push_back(alias);
  return names;
}

std::string expand_white_space_escapes(std::string_view regex) {
  std::string out;
  out.reserve(regex.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < regex.size(); ++i) {
    const char c = regex[i];
    if (c == '\\' && i + 1 < regex.size()) {
      const char e = regex[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceSet) : "[" + std::string(kWhiteSpaceSet) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceSet) + "]";
      } else if (e == 'S') {
        throw ModelError(
            fmt::format("pre-tokenizer regex '{}': \\S inside a class is not supported", regex));
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < regex.size() && regex[i + 1] == '^') out += regex[++i];
      if (i + 1 < regex.size() && regex[i + 1] == ']') out += regex[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  bool newline_callout = false;  // the pattern asks kNewlineAhead before each `\s*[\r\n]`
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

// `\s*[\r\n]` fails unless the white space starting where it is tried holds a line break, and
// finding that out costs the whole run. Tried at every 512 spaces of a long run (jais-2 cuts runs
// into powers of two), that made splitting quadratic. A callout numbered kNewlineAhead before the
// item answers from a table made once per text, so a failing try costs one lookup; the matches
// are the same, since the callout only refuses a place where the item cannot match.
constexpr int kNewlineAhead = 1;
constexpr std::string_view kNewlineItem = "\\s*[\\r\\n]";

std::string add_newline_callouts(std::string_view regex, bool& added) {
  std::string out;
  added = false;
  for (size_t i = 0; i < regex.size();) {
    if (regex.compare(i, kNewlineItem.size(), kNewlineItem) == 0 &&
        (i == 0 || regex[i - 1] != '\\')) {
      out += fmt::format("(?C{})", kNewlineAhead);
      out += kNewlineItem;
      i += kNewlineItem.size();
      added = true;
    } else {
      out += regex[i++];
    }
  }
  return out;
}

struct CalloutData {
  const uint8_t* newline_ahead = nullptr;  // by byte offset from the start of the current piece
};

int answer_callout(pcre2_callout_block* block, void* data) {
  if (block->callout_number != uint32_t(kNewlineAhead)) return 0;
  const auto* d = static_cast<const CalloutData*>(data);
  return d->newline_ahead[block->current_position] ? 0 : 1;  // 1: fail here, try on
}

}  // namespace

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes) {
  for (const auto& regex : regexes) {
    bool callout = false;
    const std::string pattern = expand_white_space_escapes(add_newline_callouts(regex, callout));
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &error_offset, nullptr);
    if (!compiled->code)
      throw ModelError(fmt::format("pre-tokenizer regex '{}' does not compile (offset {}): {}",
                                   regex, error_offset, pcre2_message(error)));
    // Without JIT support pcre2_match interprets the pattern; both give the same matches.
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    compiled->newline_callout = callout;
    regexes_.push_back(std::move(compiled));
  }
}

PreTokenizer::~PreTokenizer() = default;

namespace {

struct MatchResources {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  MatchResources() {
    if (!data || !context) throw std::bad_alloc();
    if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchResources() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchResources(const MatchResources&) = delete;
  MatchResources& operator=(const MatchResources&) = delete;
};

}  // namespace

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  const std::vector<uint32_t> cps = unicode::decode_utf8(text);
  const size_t n_cps = cps.size();

  // PCRE2 needs valid UTF-8: surrogates and values past U+10FFFF (which the lenient decoder
  // lets through) are matched as U+FFFD, while the words keep the original code points.
  std::string subject;
  subject.reserve(text.size() + 8);
  std::vector<size_t> cp_byte(n_cps + 1);
  for (size_t i = 0; i < n_cps; ++i) {
    cp_byte[i] = subject.size();
    uint32_t cp = cps[i];
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = unicode::kReplacementChar;
    unicode::append_utf8(subject, cp);
  }
  cp_byte[n_cps] = subject.size();
  std::vector<uint32_t> byte_cp(subject.size() + 1, 0);
  for (size_t i = 0; i <= n_cps; ++i) byte_cp[cp_byte[i]] = uint32_t(i);

  // newline_ahead[b]: the white space from byte b on holds \r or \n (0 elsewhere).
  std::vector<uint8_t> newline_ahead;
  const bool any_callout = std::any_of(regexes_.begin(), regexes_.end(),
                                       [](const auto& r) { return r->newline_callout; });
  if (any_callout) {
    newline_ahead.assign(subject.size() + 1, 0);
    uint8_t ahead = 0;
    for (size_t i = n_cps; i-- > 0;) {
      ahead = cps[i] == '\r' || cps[i] == '\n' ? 1 : unicode::is_white_space(cps[i]) ? ahead : 0;
      newline_ahead[cp_byte[i]] = ahead;
    }
  }

  MatchResources res;
  CalloutData callout_data;
  std::vector<size_t> pieces;  // lengths in code points
  if (n_cps) pieces.push_back(n_cps);

  for (const auto& regex : regexes_) {
    std::vector<size_t> refined;
    refined.reserve(pieces.size() * 2);
    size_t piece_start = 0;
    for (const size_t piece_len : pieces) {
      const size_t b0 = cp_byte[piece_start];
      const size_t len = cp_byte[piece_start + piece_len] - b0;
      const auto* sub = reinterpret_cast<PCRE2_SPTR>(subject.data() + b0);
      if (regex->newline_callout) {
        callout_data.newline_ahead = newline_ahead.data() + b0;
        pcre2_set_callout(res.context, answer_callout, &callout_data);
      } else {
        pcre2_set_callout(res.context, nullptr, nullptr);
      }
      auto cp_at = [&](size_t rel) { return size_t(byte_cp[b0 + rel]); };

      size_t pos = 0, last_end = 0;
      uint32_t options = 0;
      while (pos <= len) {
        int rc = pcre2_match(regex->code, sub, len, pos, options | PCRE2_NO_UTF_CHECK, res.data,
                             res.context);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
          rc = pcre2_match(regex->code, sub, len, pos, options | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                           res.data, res.context);
        if (rc == PCRE2_ERROR_NOMATCH) {
          if (options == 0 || pos == len) break;
          // No non-empty match where the last empty one was: move on by one code point.
          pos = cp_byte[cp_at(pos) + 1] - b0;
          options = 0;
          continue;
        }
        if (rc < 0)
          throw ModelError(fmt::format("pre-tokenizer regex failed: {}", pcre2_message(rc)));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(res.data);
        const size_t ms = ov[0], me = ov[1];
        if (ms > last_end) refined.push_back(cp_at(ms) - cp_at(last_end));
        if (me > ms) refined.push_back(cp_at(me) - cp_at(ms));
        last_end = me;
        pos = me;
        // After an empty match, first look for a non-empty one at the same place.
        options = me == ms ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
      }
      if (last_end < len) refined.push_back(cp_at(len) - cp_at(last_end));
      piece_start += piece_len;
    }
    pieces = std::move(refined);
  }

  std::vector<std::string> words;
  words.reserve(pieces.size());
  size_t start = 0;
  for (const size_t piece_len : pieces) {
    std::string word;
    for (size_t i = start; i < start + piece_len; ++i) unicode::append_utf8(word, cps[i]);
    words.push_back(std::move(word));
    start += piece_len;
  }
  return words;
}

}  // namespace ps
