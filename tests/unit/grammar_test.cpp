// The grammar engine (grammar/grammar.h, grammar/matcher.h): GBNF parsing and its errors, and
// the matcher against a reference recognizer written another way (memoized top-down matching of
// whole code-point strings) on sentences of several grammars, their prefixes and mutations, and
// random token vocabularies cut from them, UTF-8 characters split across tokens included.
#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace ps::grammar {
namespace {

std::vector<uint32_t> decode(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = uint8_t(s[i]);
    const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uint32_t c = n == 1 ? b : n == 2 ? b & 0x1F : n == 3 ? b & 0x0F : b & 0x07;
    for (int k = 1; k < n; ++k) c = (c << 6) | (uint8_t(s[i + size_t(k)]) & 0x3F);
    out.push_back(c);
    i += size_t(n);
  }
  return out;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = uint8_t(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

std::string encode(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += char(c);
  } else if (c < 0x800) {
    s += char(0xC0 | (c >> 6)), s += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += char(0xE0 | (c >> 12)), s += char(0x80 | ((c >> 6) & 0x3F)), s += char(0x80 | (c & 0x3F));
  } else {
    s += char(0xF0 | (c >> 18)), s += char(0x80 | ((c >> 12) & 0x3F));
    s += char(0x80 | ((c >> 6) & 0x3F)), s += char(0x80 | (c & 0x3F));
  }
  return s;
}

// The reference: the positions a symbol sequence can reach from position i of a code-point
// string, with kOver meaning "ran past the end of the string while still matching" (the string
// is then a viable prefix). No stacks, no tail calls: plain recursion over the rules.
class Reference {
 public:
  static constexpr size_t kOver = size_t(-1);
  Reference(const Grammar& g, std::vector<uint32_t> s) : g_(g), s_(std::move(s)) {}

  // The whole string read, with the grammar complete there or wanting more.
  bool viable() {
    const std::set<size_t> r = seq(g_.rules[g_.root].alternatives, 0);
    return r.count(kOver) > 0 || r.count(s_.size()) > 0;
  }
  bool complete() {
    const std::set<size_t> r = seq(g_.rules[g_.root].alternatives, 0);
    return r.count(s_.size()) > 0;
  }

 private:
  std::set<size_t> seq(const std::vector<uint32_t>& alts, size_t i) {
    std::set<size_t> out;
    for (uint32_t at : alts)
      for (size_t j : from(at, i)) out.insert(j);
    return out;
  }
  // Positions after the symbols from code[at] to its sequence's end, starting at i.
  std::set<size_t> from(uint32_t at, size_t i) {
    const auto key = std::make_pair(at, i);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::set<size_t> out;
    const Symbol sym = g_.code[at];
    if (sym.type == Symbol::Type::end) {
      out.insert(i);
    } else {
      std::set<size_t> mids;
      if (sym.type == Symbol::Type::chars) {
        if (i == s_.size())
          mids.insert(kOver);
        else if (g_.sets[sym.index].contains(s_[i]))
          mids.insert(i + 1);
      } else {
        mids = seq(g_.rules[sym.index].alternatives, i);
      }
      for (size_t m : mids) {
        if (m == kOver) {
          out.insert(kOver);
          continue;
        }
        for (size_t j : from(at + 1, m)) out.insert(j);
      }
    }
    memo_[key] = out;
    return out;
  }

  const Grammar& g_;
  std::vector<uint32_t> s_;
  std::map<std::pair<uint32_t, size_t>, std::set<size_t>> memo_;
};

// Sentences by random derivation (depth-limited: past it, the shortest-looking alternative).
std::string derive(const Grammar& g, uint32_t rule, std::mt19937& rng, int depth) {
  const auto& alts = g.rules[rule].alternatives;
  uint32_t pick = alts[rng() % alts.size()];
  if (depth > 12) {  // prefer an alternative with no references, else the shortest
    size_t best = size_t(-1);
    for (uint32_t a : alts) {
      size_t len = 0, refs = 0;
      for (uint32_t i = a; g.code[i].type != Symbol::Type::end; ++i, ++len)
        refs += g.code[i].type == Symbol::Type::rule;
      if (refs * 100 + len < best) best = refs * 100 + len, pick = a;
    }
  }
  std::string out;
  for (uint32_t i = pick; g.code[i].type != Symbol::Type::end; ++i) {
    if (g.code[i].type == Symbol::Type::rule) {
      out += derive(g, g.code[i].index, rng, depth + 1);
      continue;
    }
    const CharSet& set = g.sets[g.code[i].index];
    uint32_t c = 'x';
    if (!set.negated) {
      const auto& [lo, hi] = set.ranges[rng() % set.ranges.size()];
      c = lo + uint32_t(rng() % (hi - lo + 1));
    } else {
      const uint32_t pool[] = {'a', 'Z', '7', ' ', 0xE9, 0x4E2D, 0x1F600};
      for (int tries = 0; tries < 20 && !set.contains(c); ++tries) c = pool[rng() % 7];
    }
    out += encode(c);
  }
  return out;
}

const char* const kJson = R"G(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws ::= | " " | "\n" [ \t]{0,20}
)G";

const char* const kArith = R"G(
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
)G";

const char* const kMisc = R"G(# comments, unicode, ranges, counted repetitions
root ::= greeting " " name{1,3} tail? "."
greeting ::= "héllo" | "你好" | [\u0041-\u0043]+
name ::= [a-z] [a-z0-9_]{0,4} " "?
tail ::= "!" | "😀"{2} | [^.a-z]
)G";

TEST(Grammar, ParsesAndPrintsRules) {
  const Grammar g = Grammar::parse(kArith);
  EXPECT_EQ(g.rules[g.root].name, "root");
  const std::string text = g.to_gbnf();
  EXPECT_NE(text.find("factor ::= "), std::string::npos) << text;
  // The printed grammar is a grammar again, with the same sentences.
  const Grammar again = Grammar::parse(text);
  for (const char* s : {"1+2*(3-4)", "-7", "((2))/3", "1+", "(", "a"}) {
    Matcher m(std::make_shared<Grammar>(g)), n(std::make_shared<Grammar>(again));
    EXPECT_EQ(m.accept(s) && m.can_end(), n.accept(s) && n.can_end()) << s;
  }
}

TEST(Grammar, ErrorsNameWhatIsWrong) {
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"root ::= foo", "'foo' is used but not defined"},
      {"start ::= \"a\"", "no rule named 'root'"},
      {"root ::= root \"a\" | \"b\"", "can reach itself"},
      {"root ::= x* \nx ::= \"a\"?", "can reach itself"},
      {"root ::= \"abc", "closing '\"'"},
      {"root ::= [a-", "closing ']'"},
      {"root ::= [z-a]", "end is before its start"},
      {"root ::= (\"a\"", "')'"},
      {"root ::= \"a\"{3,2}", "n below m"},
      {"root ::= \"a\"{99999}", "over 10000"},
      {"root ::= \"\\q\"", "unknown escape"},
      {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
      {"root \"a\"", "expected '::='"},
      {"root ::= *", "follows nothing"},
      {"root ::= \"a\" ) ", "unexpected ')'"},
      // Four bytes that spell a value past U+10FFFF (found by fuzz_grammar: printed back as an
      // escape the parser refuses).
      {"root ::= \"\xf4\x98\x8d\x8b\"", "beyond U+10FFFF"},
      {"root ::= [\xf7\xbf\xbf\xbf]", "beyond U+10FFFF"},
      {"root ::= \"\\U00110000\"", "an escape beyond U+10FFFF"},
  };
  for (const auto& [src, want] : bad) {
    try {
      Grammar::parse(src);
      ADD_FAILURE() << "accepted: " << src;
    } catch (const GrammarError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << src << " -> " << e.what();
    }
  }
}

TEST(Grammar, CharSetIntersectsAsBruteForceSays) {
  std::mt19937 rng(5);
  for (int t = 0; t < 300; ++t) {
    CharSet s;
    s.negated = rng() % 2;
    for (int r = int(rng() % 4); r > 0; --r) {
      const uint32_t lo = rng() % 60;
      s.ranges.emplace_back(lo, lo + rng() % 8);
    }
    const uint32_t lo = rng() % 70, hi = lo + rng() % 10;
    bool any = false;
    for (uint32_t c = lo; c <= hi; ++c) any = any || s.contains(c);
    EXPECT_EQ(s.intersects(lo, hi), any);
  }
}

TEST(Matcher, RepetitionsKeepStacksShallow) {
  // Ten thousand repetitions of a starred item: tail calls keep every stack bounded, so this
  // takes linear time.
  auto g = std::make_shared<Grammar>(Grammar::parse("root ::= (\"ab\" | \"c\")* \"!\""));
  Matcher m(g);
  std::string s;
  for (int i = 0; i < 10000; ++i) s += i % 3 ? "ab" : "c";
  EXPECT_TRUE(m.accept(s));
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept("b"));
  EXPECT_TRUE(m.accept("!"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.can_continue());
}

TEST(Matcher, RunsOfRulesThatCanBeEmptyStayPolynomial) {
  // Thirty optional items in a row, and optionals nested thirty deep: every way of skipping
  // them ends in the same stacks, which are followed once (2^30 paths otherwise).
  for (const char* src : {R"(root ::= ("a"?){30} "b")",
                          R"(root ::= ("a" | "c")??????????????????????????????{3} "b")"}) {
    auto g = std::make_shared<Grammar>(Grammar::parse(src));
    Matcher m(g);
    EXPECT_TRUE(m.accept("aa")) << src;
    EXPECT_TRUE(m.allows("b")) << src;
    EXPECT_TRUE(m.accept("ab")) << src;
    EXPECT_TRUE(m.can_end()) << src;
  }
}

TEST(Matcher, AgreesWithTheReferenceOnSentencesPrefixesAndTokens) {
  std::mt19937 rng(1234);
  int checked = 0, allowed = 0;
  for (const char* src : {kJson, kArith, kMisc}) {
    auto g = std::make_shared<Grammar>(Grammar::parse(src));
    std::vector<std::string> texts;
    for (int i = 0; i < 40; ++i) texts.push_back(derive(*g, g->root, rng, 0));
    // Mutations: a byte changed, a piece dropped, two sentences joined.
    for (int i = 0; i < 40; ++i) {
      std::string t = texts[rng() % 40];
      if (t.empty()) continue;
      const size_t at = rng() % t.size();
      switch (rng() % 3) {
        case 0:
          t[at] = "{}[]\",:0a-+* .!"[rng() % 15];
          break;
        case 1:
          t.erase(at, 1 + rng() % 3);
          break;
        default:
          t += texts[rng() % 40];
      }
      texts.push_back(t);
    }
    // A vocabulary: random byte pieces of the texts, so pieces cut UTF-8 characters too.
    std::vector<std::string> vocab = {"{",    "}", "\"",       " ",        "\n",   "é", "\xC3",
                                      "\xA9", "😀", "\xF0\x9F", "\x98\x80", "true", "1", "+"};
    for (int i = 0; i < 200; ++i) {
      const std::string& t = texts[rng() % texts.size()];
      if (t.empty()) continue;
      const size_t a = rng() % t.size();
      vocab.push_back(t.substr(a, 1 + rng() % 6));
    }
    for (const std::string& text : texts) {
      // Walk the text's bytes in pieces; at each cut, every vocabulary entry is judged.
      Matcher m(g);
      size_t at = 0;
      bool alive = true;
      while (alive && at <= text.size()) {
        const std::string prefix = text.substr(0, at);
        for (size_t v = 0; v < vocab.size(); v += 1 + rng() % 7) {
          const std::string whole = prefix + vocab[v];
          // The reference sees whole characters: a cut last character is tried as each
          // character that starts with those bytes, as far as a small set of them goes.
          const size_t cut = [&] {
            size_t i = whole.size(), k = 0;
            while (i > 0 && (uint8_t(whole[i - 1]) & 0xC0) == 0x80 && k < 3) --i, ++k;
            if (i == 0) return size_t(0);
            const auto lead = uint8_t(whole[i - 1]);
            const size_t want = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
            return want > k ? whole.size() - (i - 1) : size_t(0);
          }();
          bool expect = false;
          if (cut == 0) {
            expect = valid_utf8(whole) && Reference(*g, decode(whole)).viable();
          } else {
            const std::string head = whole.substr(0, whole.size() - cut);
            const std::string tail = whole.substr(whole.size() - cut);
            const std::vector<uint32_t> candidates = {0xE9, 0x4F60, 0x597D, 0x1F600, 0xC3, 0xE0};
            for (uint32_t c : candidates) {
              const std::string e = encode(c);
              if (valid_utf8(head) && e.size() > tail.size() &&
                  e.compare(0, tail.size(), tail) == 0)
                expect = expect || Reference(*g, decode(head + e)).viable();
            }
            if (!expect) continue;  // the candidates cover only some characters: judge a yes
          }
          allowed += expect;
          EXPECT_EQ(m.allows(vocab[v]), expect)
              << "after " << testing::PrintToString(prefix) << " the piece "
              << testing::PrintToString(vocab[v]);
          ++checked;
        }
        const size_t step = 1 + rng() % 5;
        const std::string piece = text.substr(at, step);
        if (at >= text.size()) break;
        alive = m.accept(piece);
        at += step;
      }
      if (alive) {
        EXPECT_EQ(m.can_end(), Reference(*g, decode(text)).complete())
            << testing::PrintToString(text);
      }
    }
  }
  // Both answers are exercised, each many times.
  EXPECT_GT(allowed, 500) << checked;
  EXPECT_GT(checked - allowed, 2000) << allowed;
  std::printf("[ checked  ] %d pieces, %d allowed\n", checked, allowed);
}

// Byte tokens can spell a character in more bytes than UTF-8 allows ("{" as C1 BB, E0 81 BB or
// F0 80 81 BB): such forms, surrogates and code points past U+10FFFF are not the grammar's
// characters, whole or cut across pieces.
TEST(Matcher, RefusesWhatIsNotUtf8) {
  const auto g = std::make_shared<Grammar>(Grammar::parse(R"(root ::= "{" [^a] "}")"));
  for (const std::string bad : {"\xC1\xBB", "\xE0\x81\xBB", "\xF0\x80\x81\xBB"}) {
    Matcher m(g);
    EXPECT_FALSE(m.allows(bad));
    EXPECT_FALSE(m.accept(bad));
    EXPECT_FALSE(m.allows(bad.substr(0, 1))) << "a lead byte that only starts overlong forms";
    EXPECT_FALSE(m.allows(bad.substr(0, 2)));
  }
  Matcher m(g);
  ASSERT_TRUE(m.accept("{"));
  EXPECT_FALSE(m.allows("\xED\xA0\x80"));  // U+D800
  EXPECT_FALSE(m.accept("\xED\xA0\x80"));
  EXPECT_FALSE(m.allows("\xED\xA0"));          // only surrogates start so
  EXPECT_TRUE(m.allows("\xED"));               // U+D000..U+D7FF do too
  EXPECT_FALSE(m.allows("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(m.allows("\xF5"));
  EXPECT_TRUE(m.allows("\xC3"));  // the start of U+00C0..U+00FF
  EXPECT_TRUE(m.accept("\xC3\xA9"));
  EXPECT_TRUE(m.accept("}"));
  EXPECT_TRUE(m.can_end());
}

}  // namespace
}  // namespace ps::grammar
