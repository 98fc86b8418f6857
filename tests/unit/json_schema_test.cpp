// JSON Schema to GBNF (grammar/json_schema.h): for each supported keyword and their
// combinations, hand-written instances and non-instances through the matcher (a document is
// taken when accept(doc) && can_end()), compact and spaced; integer bounds exhaustively over
// small ranges and by sampling over large ones; patterns against PCRE2 (set to read them as
// ECMAScript does on ASCII: JavaScript's \u and \x, `.` not matching \r or \n, `$` only at the
// end) on random strings; the errors, each naming the keyword and its JSON pointer. Every grammar
// compiled here goes through Grammar::parse.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace ps::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const Grammar> compile(const std::string& schema) {
  const std::string gbnf = json_schema_to_gbnf(ojson::parse(schema));
  try {
    return std::make_shared<const Grammar>(Grammar::parse(gbnf));
  } catch (const GrammarError& e) {
    ADD_FAILURE() << "the grammar of " << schema << " does not parse: " << e.what() << "\n" << gbnf;
    throw;
  }
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& doc) {
  Matcher m(g);
  return m.accept(doc) && m.can_end();
}

// The document again with whitespace between its tokens, as JSON writers put it.
std::vector<std::string> spaced(const std::string& doc) {
  const ojson v = ojson::parse(doc);
  return {v.dump(), v.dump(2), v.dump(4), v.dump(1, '\t')};
}

// Every valid document (and its spaced forms, unless `exact`) is taken, no invalid one is.
void check(const std::string& schema, const std::vector<std::string>& valid,
           const std::vector<std::string>& invalid, bool exact = false) {
  SCOPED_TRACE(schema);
  const auto g = compile(schema);
  for (const std::string& doc : valid) {
    EXPECT_TRUE(accepts(g, doc)) << "refused: " << doc << "\n"
                                 << json_schema_to_gbnf(ojson::parse(schema));
    if (exact) continue;
    for (const std::string& s : spaced(doc)) EXPECT_TRUE(accepts(g, s)) << "refused: " << s;
  }
  for (const std::string& doc : invalid)
    EXPECT_FALSE(accepts(g, doc)) << "taken: " << doc << "\n"
                                  << json_schema_to_gbnf(ojson::parse(schema));
}

std::string error_of(const std::string& schema) {
  try {
    json_schema_to_gbnf(ojson::parse(schema));
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JsonSchema, AnyValueAndTheHelpers) {
  const std::vector<std::string> values = {
      "{}",      "[]",    "0",
      "-1.5e+3", "\"x\"", "true",
      "false",   "null",  R"({"a":[1,{"b":null}],"c":"\u00e9\n"})"};
  for (const char* schema : {"true", "{}", R"({"description": "anything"})"}) {
    check(schema, values, {"", "tru", "01", "{", "[1,]", "{\"a\"}", "'x'", "nan", " 1", "1 "});
  }
  const auto object = std::make_shared<const Grammar>(Grammar::parse(json_object_gbnf()));
  EXPECT_TRUE(accepts(object, R"({"a": [1, 2], "b": {"c": "d"}})"));
  EXPECT_TRUE(accepts(object, "{}"));
  EXPECT_FALSE(accepts(object, "[]"));
  EXPECT_FALSE(accepts(object, "\"x\""));
  const auto value = std::make_shared<const Grammar>(Grammar::parse(json_value_gbnf()));
  for (const std::string& v : values) EXPECT_TRUE(accepts(value, v)) << v;
  EXPECT_FALSE(accepts(value, "{"));
}

TEST(JsonSchema, Whitespace) {
  const auto g = compile(R"({"type": "array", "items": {"type": "integer"}})");
  EXPECT_TRUE(accepts(g, "[1,2]"));
  EXPECT_TRUE(accepts(g, "[ 1 , 2 ]"));
  EXPECT_TRUE(accepts(g, "[\n  1,\n  2\n]"));
  EXPECT_TRUE(accepts(g, "[\n\t\t1]"));
  EXPECT_TRUE(accepts(g, "[\n" + std::string(20, ' ') + "1]"));
  EXPECT_FALSE(accepts(g, "[\n" + std::string(21, ' ') + "1]"));  // at most 20
  EXPECT_FALSE(accepts(g, "[  1]"));                              // one space at most
  EXPECT_FALSE(accepts(g, "[\n\n1]"));
  EXPECT_FALSE(accepts(g, " [1]"));  // none around the value
  EXPECT_FALSE(accepts(g, "[1] "));
  EXPECT_FALSE(accepts(g, "[1]\n"));
}

TEST(JsonSchema, Primitives) {
  check(R"({"type": "string"})",
        {R"("")", R"("abc")", R"("a\"b\\c\/\b\f\n\r\t")", R"("\u00e9é😀")", R"("\ud83d\ude00")"},
        {"abc", R"("a)", "\"a\nb\"", R"("\x")", R"("\u12")", R"("\ud83d")", R"("\ude00x")", "1"});
  // Digits as llama.cpp bounds them: 16 integral, 16 fraction, 3 exponent.
  check(R"({"type": "number"})",
        {"0", "-0", "12", "-3.25", "1e5", "1E-5", "2.5e+10", "-0.0", "1234567890123456",
         "0.1234567890123456", "1e100"},
        {"01", "1.", ".5", "+1", "1e", "--1", "1.5.2", "\"1\"", "Infinity", "NaN",
         "12345678901234567", "0.12345678901234567", "1e1000"});
  check(R"({"type": "integer"})", {"0", "7", "-12", "1234567890123456", "-1234567890123456"},
        {"-0", "01", "1.0", "1e3", "+3", "", "-", "12345678901234567"});
  check(R"({"type": "boolean"})", {"true", "false"}, {"True", "1", "null", "\"true\""});
  check(R"({"type": "null"})", {"null"}, {"nil", "0", "\"null\"", "{}"});
}

TEST(JsonSchema, TypeListsAndInference) {
  check(R"({"type": ["string", "null"]})", {R"("x")", "null"}, {"1", "{}", "true"});
  check(R"({"type": ["integer", "boolean"], "minimum": 3})", {"3", "99", "true"},
        {"2", "-1", "null", "3.5"});
  check(R"({"type": ["number", "integer"]})", {"1.5", "2"}, {"\"1\""});
  check(R"({"properties": {"a": {"type": "integer"}}})", {"{}", R"({"a":1})"}, {"[]", "1"});
  check(R"({"required": ["a"]})", {R"({"a":[1]})"}, {"{}", "1"});
  check(R"({"items": {"type": "string"}})", {"[]", R"(["a","b"])"}, {"{}", "[1]"});
  check(R"({"maxLength": 2})", {R"("ab")"}, {R"("abc")", "1"});
}

TEST(JsonSchema, ObjectsKeepOrderAndCommas) {
  // a required, b and c optional, d required: every subset of {b, c}, in order.
  const std::string schema = R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"},
      "d": {"type": "null"}}, "required": ["a", "d"]})";
  check(schema,
        {R"({"a":1,"d":null})", R"({"a":1,"b":"x","d":null})", R"({"a":1,"c":true,"d":null})",
         R"({"a":1,"b":"x","c":false,"d":null})"},
        {"{}", R"({"a":1})", R"({"d":null})", R"({"a":1,"d":null,"b":"x"})",
         R"({"b":"x","a":1,"d":null})", R"({"a":1,,"d":null})", R"({"a":1,"d":null,})",
         R"({,"a":1,"d":null})", R"({"a":1 "d":null})", R"({"a":1,"d":null,"e":1})",
         R"({"a":1,"b":"x","b":"y","d":null})"});
  // All optional: the empty object, any subset in order, never a stray comma.
  check(R"({"properties": {"x": {"type": "integer"}, "y": {"type": "integer"},
           "z": {"type": "integer"}}})",
        {"{}", R"({"x":1})", R"({"y":2})", R"({"z":3})", R"({"x":1,"z":3})", R"({"y":2,"z":3})",
         R"({"x":1,"y":2,"z":3})"},
        {R"({,"y":2})", R"({"x":1,})", R"({"y":2,"x":1})", R"({"x":1,"x":1})", R"({"w":0})"});
  // Optional after the last required one.
  check(R"({"properties": {"a": {"const": 1}, "b": {"const": 2}}, "required": ["a"]})",
        {R"({"a":1})", R"({"a":1,"b":2})"}, {R"({"b":2})", "{}", R"({"a":1,"b":1})"});
  // The same schema read as nlohmann::json: properties in sorted order.
  const auto sorted = std::make_shared<const Grammar>(Grammar::parse(json_schema_to_gbnf(
      nlohmann::json::parse(R"({"properties": {"b": {}, "a": {}}, "required": ["a", "b"]})"))));
  EXPECT_TRUE(accepts(sorted, R"({"a":1,"b":2})"));
  EXPECT_FALSE(accepts(sorted, R"({"b":2,"a":1})"));
  // Keys that need escapes, and a key of another script.
  check(R"({"properties": {"q\"uote": {"type": "integer"}, "ключ": {"type": "integer"}},
           "required": ["q\"uote", "ключ"]})",
        {R"({"q\"uote":1,"ключ":2})"}, {R"({"q"uote":1,"ключ":2})"});
}

TEST(JsonSchema, AdditionalProperties) {
  const std::string open =
      R"({"properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
      "required": ["id"], "additionalProperties": {"type": "integer"}})";
  check(open,
        {R"({"id":1})", R"({"id":1,"name":"n"})", R"({"id":1,"x":2})",
         R"({"id":1,"name":"n","x":2,"yy":3})", R"({"id":1,"nam":5})", R"({"id":1,"names":5})",
         R"({"id":1,"":5})", R"({"id":1,"i":5})"},
        {R"({"id":1,"x":"s"})", R"({"x":2,"id":1})", R"({"id":1,"id":2})", R"({"id":1,"name":5})",
         R"({"id":1,"x":2,"name":"n"})", R"({"id":1,"x":2,})"});
  check(R"({"properties": {"a": {"type": "string"}}, "additionalProperties": true})",
        {"{}", R"({"a":"x"})", R"({"b":[1,2],"c":{}})", R"({"a":"x","b":null})"},
        {R"({"a":1})", R"({"b":1,"a":"x"})"});
  check(R"({"type": "object", "additionalProperties": {"type": "boolean"}})",
        {"{}", R"({"a":true})", R"({"a":true,"b":false})"}, {R"({"a":1})", "[]"});
  check(R"({"type": "object"})", {"{}", R"({"a":1,"b":[{}]})"}, {"[]", R"({"a"})"});
  check(R"({"type": "object", "additionalProperties": false, "properties": {"a": {}}})",
        {"{}", R"({"a":1})"}, {R"({"b":1})"});
  // A required name that is not a property: any value (additionalProperties absent), or the
  // schema of additionalProperties.
  check(R"({"required": ["k"]})", {R"({"k":1})", R"({"k":"v"})"}, {"{}"});
  check(R"({"required": ["k"], "additionalProperties": {"type": "string"}})",
        {R"({"k":"v"})", R"({"k":"v","z":"w"})"}, {R"({"k":1})", "{}"});
  // minProperties/maxProperties the properties already satisfy.
  check(R"({"properties": {"a": {}, "b": {}}, "required": ["a"], "minProperties": 1,
           "maxProperties": 2})",
        {R"({"a":1})", R"({"a":1,"b":2})"}, {"{}"});
}

TEST(JsonSchema, Arrays) {
  check(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4})",
        {"[1,2]", "[1,2,3]", "[1,2,3,4]"},
        {"[]", "[1]", "[1,2,3,4,5]", "[1,2,]", "[1,,2]", "[1,\"a\"]"});
  check(R"({"type": "array", "minItems": 1})", {"[1]", R"([1,"a",null])"}, {"[]"});
  check(R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"});
  check(R"({"type": "array", "items": {"type": "boolean"}, "maxItems": 1})", {"[]", "[true]"},
        {"[true,false]"});
  // A tuple: prefixItems, then items for the rest.
  check(R"({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false})",
        {"[]", R"(["a"])", R"(["a",1])"}, {R"(["a",1,2])", "[1]", R"(["a","b"])"});
  check(R"({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false,
           "minItems": 2})",
        {R"(["a",1])"}, {"[]", R"(["a"])"});
  check(R"({"prefixItems": [{"type": "string"}], "items": {"type": "null"}, "minItems": 3})",
        {R"(["a",null,null])", R"(["a",null,null,null])"}, {R"(["a",null])", R"(["a",1,null])"});
  check(R"({"prefixItems": [{"const": 1}]})", {"[]", "[1]", R"([1,"x",{}])"}, {"[2]"});
  // Draft 7's tuples.
  check(R"({"items": [{"type": "integer"}, {"type": "integer"}], "additionalItems": false})",
        {"[]", "[1]", "[1,2]"}, {"[1,2,3]", "[\"a\"]"});
  check(R"({"items": [{"type": "integer"}], "additionalItems": {"type": "string"}})",
        {"[1]", R"([1,"a","b"])"}, {"[1,2]"});
  check(R"({"type": "array", "uniqueItems": false})", {"[1,1]"}, {"{}"});
  // Nested arrays and objects.
  check(R"({"type": "array", "items": {"type": "array", "items": {"type": "object",
           "properties": {"v": {"type": "integer"}}, "required": ["v"]}}})",
        {"[]", "[[]]", R"([[{"v":1}],[{"v":2},{"v":3}]])"}, {R"([[{"v":"1"}]])", R"([{"v":1}])"});
}

TEST(JsonSchema, StringLengthsCountCharacters) {
  check(R"({"type": "string", "minLength": 2, "maxLength": 3})",
        {R"("ab")", R"("abc")", R"("é😀")", R"("\n\"")", R"("\u00e9ab")", R"("\ud83d\ude00x")"},
        {R"("a")", R"("abcd")", R"("\n")", R"("\u00e9abc")", R"("")"});
  check(R"({"type": "string", "maxLength": 0})", {R"("")"}, {R"("a")"});
  check(R"({"type": "string", "minLength": 1})", {R"("a")", R"("abcdefghijklmnop")"}, {R"("")"});
}

TEST(JsonSchema, Formats) {
  check(R"({"type": "string", "format": "date"})",
        {R"("2024-02-29")", R"("2000-02-29")", R"("2023-02-28")", R"("1999-12-31")",
         R"("2023-04-30")", R"("0001-01-01")", R"("0400-02-29")", R"("2023-01-31")"},
        {R"("2023-02-29")", R"("1900-02-29")", R"("2023-04-31")", R"("2023-13-01")",
         R"("2023-00-10")", R"("2023-01-00")", R"("2023-01-32")", R"("0000-01-01")",
         R"("23-01-01")", R"("2023-1-01")", R"("2023-01-01T00:00:00Z")", "2023-01-01"});
  check(R"({"type": "string", "format": "time"})",
        {R"("00:00:00Z")", R"("23:59:59.123+05:30")", R"("12:30:00-08:00")"},
        {R"("24:00:00Z")", R"("12:60:00Z")", R"("12:00:60Z")", R"("12:00Z")", R"("12:00:00")",
         R"("12:00:00+5:00")", R"("12:00:00.Z")"});
  check(R"({"type": "string", "format": "date-time"})",
        {R"("2024-05-01T09:30:00Z")", R"("2024-05-01T09:30:00.5+01:00")"},
        {R"("2024-05-01 09:30:00Z")", R"("2024-05-01T09:30Z")", R"("2024-02-30T00:00:00Z")"});
  check(R"({"type": "string", "format": "uuid"})",
        {R"("123e4567-e89b-12d3-a456-426614174000")", R"("ABCDEF00-0000-0000-0000-00000000000f")"},
        {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400")",
         R"("g23e4567-e89b-12d3-a456-426614174000")"});
}

TEST(JsonSchema, EnumAndConst) {
  check(R"({"enum": ["red", "green", 3, null, true, {"a": [1, "b"]}, [1, 2], "say \"hi\""]})",
        {R"("red")", R"("green")", "3", "null", "true", R"({"a":[1,"b"]})", "[1,2]",
         R"("say \"hi\"")"},
        {R"("blue")", "4", "false", R"({"a":[1]})", "[1, 2]", R"("say "hi"")", "\"Red\""}, true);
  check(R"({"type": "string", "enum": ["a", 1, "b"]})", {R"("a")", R"("b")"}, {"1"});
  check(R"({"const": "fixed"})", {R"("fixed")"}, {R"("other")"});
  check(R"({"const": {"k": [true, null]}})", {R"({"k":[true,null]})"}, {"{}"}, true);
  check(R"({"const": 1.5})", {"1.5"}, {"1.50", "2"});
  check(R"({"type": "integer", "enum": [1, 2.0, 2.5]})", {"1", "2.0"}, {"2.5"});
}

TEST(JsonSchema, AnyOfOneOfAllOf) {
  const std::string shapes = R"({"anyOf": [
      {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
       "required": ["kind", "r"]},
      {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "number"},
       "h": {"type": "number"}}, "required": ["kind", "w", "h"]}]})";
  check(shapes, {R"({"kind":"circle","r":1.5})", R"({"kind":"rect","w":1,"h":2})"},
        {R"({"kind":"circle","w":1,"h":2})", R"({"kind":"rect","r":1})", "{}"});
  check(R"({"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})", {"1", R"("a")"},
        {R"("ab")", "null"});
  // Keywords beside anyOf apply to every branch.
  check(R"({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
           "anyOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                     {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}]})",
        {R"({"id":1,"a":"x"})", R"({"id":1,"b":true})"},
        {R"({"id":1})", R"({"a":"x"})", R"({"id":1,"a":true})"});
  // allOf: object parts united.
  check(R"({"allOf": [
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"properties": {"b": {"type": "string"}}, "required": ["b"]},
      {"properties": {"c": {"type": "null"}}}]})",
        {R"({"a":1,"b":"x"})", R"({"a":1,"b":"x","c":null})"},
        {R"({"a":1})", R"({"b":"x"})", R"({"a":1,"b":2})"});
  check(R"({"allOf": [{"type": "integer", "minimum": 0}, {"maximum": 10}, {"minimum": 5}]})",
        {"5", "10"}, {"4", "11"});
  check(R"({"allOf": [{"type": "string"}]})", {R"("x")"}, {"1"});
  check(R"({"allOf": [{"enum": [1, 2, 3]}, {"enum": [2, 3, 4]}]})", {"2", "3"}, {"1", "4"});
  check(R"({"$defs": {"base": {"properties": {"id": {"type": "integer"}}, "required": ["id"]}},
           "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"n": {"type": "string"}}}]})",
        {R"({"id":1})", R"({"id":1,"n":"x"})"}, {R"({"n":"x"})"});
}

TEST(JsonSchema, RefsAndRecursion) {
  const std::string tree = R"({"$defs": {"node": {"type": "object", "properties": {
      "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["name"]}}, "$ref": "#/$defs/node"})";
  check(tree,
        {R"({"name":"a"})", R"({"name":"a","children":[]})",
         R"({"name":"a","children":[{"name":"b","children":[{"name":"c"}]},{"name":"d"}]})"},
        {R"({"children":[]})", R"({"name":"a","children":[{"children":[]}]})"});
  const std::string gbnf = json_schema_to_gbnf(ojson::parse(tree));
  EXPECT_NE(gbnf.find("def-node ::= "), std::string::npos) << gbnf;
  check(R"({"definitions": {"pos": {"type": "integer", "minimum": 1}},
           "type": "array", "items": {"$ref": "#/definitions/pos"}})",
        {"[1,2]"}, {"[0]"});
  // The root itself, and a pointer to any subschema.
  check(R"({"type": "object", "properties": {"next": {"$ref": "#"}, "v": {"type": "integer"}},
           "required": ["v"]})",
        {R"({"v":1})", R"({"next":{"v":2},"v":1})", R"({"next":{"next":{"v":3},"v":2},"v":1})"},
        {R"({"next":{},"v":1})"});
  check(R"({"properties": {"a": {"type": "integer", "maximum": 3},
                          "b": {"$ref": "#/properties/a"}}})",
        {R"({"a":1,"b":3})"}, {R"({"b":4})"});
  // $ref beside other keywords: both hold.
  check(R"({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 2})", {R"("ab")"},
        {R"("abc")", "1"});
}

TEST(JsonSchema, Annotations) {
  check(R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x", "title": "T",
           "description": "D", "examples": [1], "default": 1, "$comment": "c", "deprecated": false,
           "readOnly": true, "writeOnly": false, "x-order": 3, "type": "integer"})",
        {"1"}, {"\"1\""});
}

// ---- integer bounds ----

struct Bounds {
  std::optional<int64_t> min, max, xmin, xmax;
  std::string schema() const {
    ojson s = {{"type", "integer"}};
    if (min) s["minimum"] = *min;
    if (max) s["maximum"] = *max;
    if (xmin) s["exclusiveMinimum"] = *xmin;
    if (xmax) s["exclusiveMaximum"] = *xmax;
    return s.dump();
  }
  bool holds(int64_t v) const {
    return (!min || v >= *min) && (!max || v <= *max) && (!xmin || v > *xmin) &&
           (!xmax || v < *xmax);
  }
};

TEST(JsonSchema, IntegerBoundsExhaustively) {
  std::vector<Bounds> cases;
  const std::vector<std::optional<int64_t>> ends = {
      std::nullopt, -120, -100, -99, -10, -9, -1, 0, 1, 9, 10, 11, 99, 100, 101, 137};
  for (const auto& lo : ends)
    for (const auto& hi : ends) {
      if (lo && hi && *lo > *hi) continue;
      cases.push_back({lo, hi, {}, {}});
    }
  cases.push_back({{}, {}, -1, 1});
  cases.push_back({{}, {}, -100, 100});
  cases.push_back({{}, {}, 9, {}});
  cases.push_back({{}, {}, {}, -9});
  cases.push_back({-50, 50, -50, 50});
  cases.push_back({-5, {}, {}, 100});
  cases.push_back({{}, 99, -100, {}});
  for (const Bounds& b : cases) {
    SCOPED_TRACE(b.schema());
    const auto g = compile(b.schema());
    for (int64_t v = -150; v <= 150; ++v) EXPECT_EQ(accepts(g, std::to_string(v)), b.holds(v)) << v;
    for (const char* bad : {"-0", "00", "01", "-01", "+1", "1.0", "", "-", "1e1"})
      EXPECT_FALSE(accepts(g, bad)) << bad;
  }
}

TEST(JsonSchema, IntegerBoundsOfOtherForms) {
  // Fractional bounds, draft 4's boolean exclusives, bounds as floats.
  check(R"({"type": "integer", "minimum": 1.5, "maximum": 4.5})", {"2", "4"}, {"1", "5"});
  check(R"({"type": "integer", "exclusiveMinimum": 1.5, "exclusiveMaximum": 4.0})", {"2", "3"},
        {"1", "4"});
  check(R"({"type": "integer", "minimum": 2, "exclusiveMinimum": true, "maximum": 5,
           "exclusiveMaximum": true})",
        {"3", "4"}, {"2", "5"});
  check(R"({"type": "integer", "minimum": 2, "exclusiveMinimum": false})", {"2"}, {"1"});
  check(R"({"type": "integer", "minimum": -3.0, "multipleOf": 1})", {"-3"}, {"-4"});
}

TEST(JsonSchema, IntegerBoundsSampled) {
  std::mt19937_64 rng(42);
  const std::vector<Bounds> cases = {
      {-123456789, 98765432100, {}, {}},
      {0, {}, {}, {}},
      {{}, -1000000007, {}, {}},
      {1000000, 999999999999, {}, {}},
      {-9000000000000000000, 9000000000000000000, {}, {}},
      {{}, {}, -4000000000, 4000000000},
      {123, 123, {}, {}},
      {-1, 1000000000000000000, {}, {}},
  };
  for (const Bounds& b : cases) {
    SCOPED_TRACE(b.schema());
    const auto g = compile(b.schema());
    std::vector<int64_t> probes;
    for (const auto& e : {b.min, b.max, b.xmin, b.xmax})
      if (e) {
        for (int64_t d = -3; d <= 3; ++d) probes.push_back(*e + d);
      }
    for (int i = 0; i < 400; ++i) {
      const int digits = int(rng() % 19) + 1;
      int64_t v = int64_t(rng() % uint64_t(std::pow(10.0, digits)));
      if (rng() % 2) v = -v;
      probes.push_back(v);
    }
    for (const int64_t v : probes) {
      // Where a side has no bound, at most 16 digits (as the `integer` rule).
      const bool open = v > 0 ? !b.max && !b.xmax : !b.min && !b.xmin;
      const bool want = b.holds(v) && (!open || std::to_string(v).find_first_of("123456789") + 16 >=
                                                    std::to_string(v).size());
      EXPECT_EQ(accepts(g, std::to_string(v)), want) << v;
    }
  }
}

// ---- patterns ----

// A pattern searched for anywhere in a string, as JSON Schema reads it (the oracle; std::regex
// trips GCC 12's -Wmaybe-uninitialized).
class Oracle {
 public:
  explicit Oracle(const std::string& pattern) {
    pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
    pcre2_set_newline(cc, PCRE2_NEWLINE_ANYCRLF);
    int err = 0;
    PCRE2_SIZE at = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_ALT_BSUX | PCRE2_DOLLAR_ENDONLY, &err, &at, cc);
    pcre2_compile_context_free(cc);
    if (code_) data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~Oracle() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  Oracle(const Oracle&) = delete;
  Oracle& operator=(const Oracle&) = delete;
  bool ok() const { return code_ != nullptr; }
  bool search(const std::string& s) const {
    return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, data_,
                       nullptr) >= 0;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

TEST(JsonSchema, PatternsAgainstPcre2) {
  // clang-format off
  const std::vector<std::string> patterns = {
      "^[a-z]+$", "ab", "^a", "b$", "^(ab|cd)*e?$", "^\\d{2,3}-\\w+$", "a.c", "^[^a-c]{2}$",
      "x|^y|z$", "^(?:a|b)+c{2}$", "^\\s*\\S+$", "^a\"b\\\\c$", "^(a?)*b$", "^((a|)b?)+$",
      "^[\\-+]?\\d+(\\.\\d+)?$", "^\\/[a-z]{1,3}\\.x$", "[\\x41-\\x43]", "^\\u0061+$",
      "^[\\d.]*$", "^(?:[a-e]+)-[0-9]$", "^(?<word>[a-e]+)-[0-9]$", "a{b", "^$", "",
      "^[\\s\"]+$", "^\\W\\D$", "^a{0}b$", "^a{2,}$", "^.$", "^[^\\n]*\\n$", "a+b+c+",
      "^(a|ab)(c|bcd)(d*)$"};
  // clang-format on
  const std::string alphabet = "abcdexyz01-+./\"\\ \nAB";
  std::mt19937 rng(7);
  for (const std::string& p : patterns) {
    SCOPED_TRACE("pattern " + p);
    const auto g = compile(ojson({{"type", "string"}, {"pattern", p}}).dump());
    const Oracle re(p);
    ASSERT_TRUE(re.ok());
    // clang-format off
    std::vector<std::string> samples = {
        "", "a", "ab", "abc", "b", "cc", "aab", "12-ab", "a\"b\\c", "/ab.x", "aacc", "-1.5", "A",
        "ABC", "abcd", "x", "z", "abc-1", "aa", "aaa", "b\n", "abcbcdd", "xa{b"};
    // clang-format on
    for (int i = 0; i < 400; ++i) {
      std::string s;
      const size_t len = rng() % 7;
      for (size_t k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      samples.push_back(s);
    }
    int matched = 0;
    for (const std::string& s : samples) {
      const bool want = re.search(s);
      matched += want;
      EXPECT_EQ(accepts(g, ojson(s).dump()), want) << ojson(s).dump();
    }
    EXPECT_GT(matched, 0) << "no sample matched";
  }
}

TEST(JsonSchema, PatternCharactersJsonEscapes) {
  // A pattern character JSON must escape is written escaped; both \n and \u000a are read.
  check(R"({"type": "string", "pattern": "^a\nb$"})", {R"("a\nb")", R"("a\u000ab")"}, {"\"a\nb\""},
        true);
  check(R"({"type": "string", "pattern": "^\\x01$"})", {R"("\u0001")"}, {"\"\x01\""}, true);
  check(R"({"type": "string", "pattern": "^\"$"})", {R"("\"")"}, {R"(""")"}, true);
  check(R"({"type": "string", "pattern": "^é+😀$"})", {R"("éé😀")"}, {R"("e😀")"}, true);
  // A '{' that starts no quantifier is itself (as ECMAScript reads it without the u flag).
  check(R"({"type": "string", "pattern": "^a{b}$"})", {R"("a{b}")"}, {R"("ab")"}, true);
  // A named group is a group.
  check(R"({"type": "string", "pattern": "^(?<word>[a-e]+)-[0-9]$"})", {R"("abc-1")"},
        {R"("abf-1")", R"("-1")"});
}

// ---- errors ----

TEST(JsonSchema, ErrorsNameTheKeywordAndWhere) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"not": {}})", "'not' at the root is not supported"},
      {R"({"properties": {"x": {"not": {}}}})", "'not' at /properties/x is not supported"},
      {R"({"if": {}, "then": {}})", "'if' at the root is not supported"},
      {R"({"properties": {"a/b": {"items": {"contains": {}}}}})",
       "'contains' at /properties/a~1b/items is not supported"},
      {R"({"patternProperties": {"^x": {}}})", "'patternProperties' at the root"},
      {R"({"propertyNames": {"maxLength": 3}})", "'propertyNames' at the root"},
      {R"({"dependentRequired": {"a": ["b"]}})", "'dependentRequired' at the root"},
      {R"({"unevaluatedProperties": false})", "'unevaluatedProperties' at the root"},
      {R"({"type": "array", "items": {"minContains": 1}})", "'minContains' at /items"},
      {R"({"nullable": true})", "'nullable' at the root is not supported"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems': true at the root"},
      {R"({"type": "integer", "multipleOf": 3})", "'multipleOf' 3 at the root"},
      {R"({"type": "number", "minimum": 0})", "'minimum' at the root on a number"},
      {R"({"exclusiveMaximum": 5})", "'exclusiveMaximum' at the root on a number"},
      {R"({"type": "string", "format": "email"})", "format 'email' at the root is not supported"},
      {R"({"items": {"type": "string", "format": "uri"}})", "format 'uri' at /items"},
      {R"({"$ref": "other.json#/x"})", "'$ref' 'other.json#/x' at the root is not supported"},
      {R"({"$ref": "#node"})", "'$ref' '#node' at the root is not supported"},
      {R"({"$ref": "#/$defs/missing"})", "'$ref' '#/$defs/missing' at the root does not resolve"},
      {"false", "the schema false at the root admits no value"},
      {R"({"properties": {"a": false}, "required": ["a"]})", "false at /properties/a"},
      {R"j({"type": "string", "pattern": "^(?=a)"})j", "lookahead '(?=' is not supported"},
      {R"({"type": "string", "pattern": "(?!a)b"})", "lookahead '(?!' is not supported"},
      {R"({"type": "string", "pattern": "(?<=a)b"})", "lookbehind '(?<=' is not supported"},
      {R"({"type": "string", "pattern": "(a)\\1"})", "backreference '\\1' is not supported"},
      {R"({"type": "string", "pattern": "a+?"})", "lazy quantifier"},
      {R"({"type": "string", "pattern": "a*?b"})", "lazy quantifier"},
      {R"({"type": "string", "pattern": "\\bword"})", "word boundary '\\b'"},
      {R"({"type": "string", "pattern": "\\p{L}"})", "Unicode property escape '\\p'"},
      {R"({"type": "string", "pattern": "a^b"})", "'^' inside the pattern"},
      {R"({"type": "string", "pattern": "a$b"})", "'$' inside the pattern"},
      {R"({"type": "string", "pattern": "(a"})", "a '(' without its ')'"},
      {R"({"type": "string", "pattern": "*a"})", "repeats nothing"},
      {R"({"properties": {"p": {"pattern": "a{20000}"}}})",
       "pattern 'a{20000}' at /properties/p: a repetition count over 10000 is not supported"},
      {R"({"type": "string", "pattern": "x", "maxLength": 3})", "'pattern' beside 'maxLength'"},
      {R"({"type": "string", "maxLength": 20000})", "'maxLength' 20000 at the root is over 10000"},
      {R"({"properties": {"a": {}}, "minProperties": 1})", "'minProperties' at the root"},
      {R"({"type": "object", "additionalProperties": true, "maxProperties": 3})",
       "'maxProperties' at the root"},
      {R"({"enum": []})", "'enum' at the root must be a non-empty array"},
      {R"({"type": "string", "enum": [1]})", "no value of 'enum'/'const' at the root"},
      {R"({"enum": ["a"], "maxLength": 3})", "'maxLength' beside 'enum' at the root"},
      {R"({"type": "strin"})", "type \"strin\" at the root is not a JSON Schema type"},
      {R"({"type": "integer", "minimum": 5, "maximum": 4})", "no integer is within the bounds"},
      {R"({"type": "integer", "minimum": 1e30})", "out of the supported range"},
      {R"({"allOf": [{"type": "string"}, {"type": "integer"}]})",
       "no type is allowed by every part"},
      {R"({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})",
       "'pattern' differs between the parts of 'allOf' at the root"},
      {R"({"allOf": [{"properties": {"a": {}}, "additionalProperties": false},
                     {"properties": {"b": {}}}]})",
       "refuses the property 'b'"},
      {R"({"anyOf": [{}], "oneOf": [{}]})", "'anyOf' beside 'oneOf'"},
      {R"({"properties": {"a": {}}, "additionalProperties": false, "required": ["b"]})",
       "'required' names 'b' at the root, which 'additionalProperties': false refuses"},
      {R"({"prefixItems": [{}], "items": false, "minItems": 2})", "'minItems' at the root"},
      {R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
           "allOf": [{"$ref": "#/$defs/a"}]})",
       "nest deeper than"},
  };
  for (const auto& [schema, want] : bad) {
    const std::string got = error_of(schema);
    EXPECT_NE(got.find(want), std::string::npos) << schema << " -> " << got;
    EXPECT_EQ(got.rfind("json_schema: ", 0), 0u) << got;
  }
}

}  // namespace
}  // namespace ps::grammar
