// libFuzzer target for the grammar engine (grammar/grammar.h, grammar/matcher.h,
// grammar/json_schema.h): the input up to its first NUL is GBNF, or, when it starts with '{', a
// JSON schema compiled to GBNF; the rest is a text fed to a matcher of that grammar in pieces of
// up to 7 bytes. A GrammarError (and a JSON parse error) is the normal outcome of a bad grammar
// or schema. Findings: any other exception, a crash, a sanitizer report, a hang, a compiled
// schema or printed grammar that does not parse, or a piece that allows() accepts and accept()
// then refuses (or the reverse).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view src = in.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? "" : in.substr(nul + 1);
  std::string gbnf(src);
  const bool compiled = !src.empty() && src[0] == '{';
  if (compiled) {
    nlohmann::ordered_json schema;
    try {
      schema = nlohmann::ordered_json::parse(src);
      gbnf = ps::grammar::json_schema_to_gbnf(schema);
    } catch (const nlohmann::json::exception&) {
      return 0;
    } catch (const ps::grammar::GrammarError&) {
      return 0;
    }
  }
  std::shared_ptr<ps::grammar::Grammar> g;
  try {
    g = std::make_shared<ps::grammar::Grammar>(ps::grammar::Grammar::parse(gbnf));
  } catch (const ps::grammar::GrammarError&) {
    if (compiled) std::abort();  // the compiler's output must be a grammar
    return 0;
  }
  try {
    (void)ps::grammar::Grammar::parse(g->to_gbnf());
  } catch (const ps::grammar::GrammarError&) {
    std::abort();  // what it prints must read back
  }
  ps::grammar::Matcher m(g);
  size_t at = 0;
  for (int round = 0; at < text.size() && round < 256; ++round) {
    const size_t n = 1 + (uint8_t(text[at]) % 7);
    const std::string_view piece = text.substr(at, n);
    const bool allowed = m.allows(piece);
    if (m.accept(piece) != allowed) std::abort();
    if (!allowed) break;
    at += n;
  }
  (void)m.can_end();
  return 0;
}
